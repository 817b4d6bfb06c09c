package kernellane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// assets returns the folder scripts/kernel-lane.sh filled, or skips: plain
// `go test ./...` has no kernel; `make test` and `make test-kernel` build
// one and set SCOUR_KERNEL_LANE.
func assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvAssets)
	if dir == "" {
		t.Skip(EnvAssets + " unset: `make test-kernel` builds the guest and runs these tests")
	}
	for _, f := range []string{"vmlinuz", "initramfs.cpio"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s=%s: %v (run scripts/kernel-lane.sh %s)", EnvAssets, dir, err, dir)
		}
	}
	return dir
}

// TestGuest runs kernellane/guest inside the guest, against the real
// kernel, sysfs, nvme-cli and the emulated controllers, and fails with the
// guest's own test output unless every test passed.
func TestGuest(t *testing.T) {
	dir := assets(t)
	cmdline := []string{"scour.run=tests"}
	if run := os.Getenv("SCOUR_KERNEL_GUEST_RUN"); run != "" { // -test.run in the guest, for development
		cmdline = append(cmdline, "scour.test="+run)
	}
	res, err := Run(context.Background(), Boot{Assets: dir, Dir: t.TempDir(), Disks: Machine(), Cmdline: cmdline})
	if res != nil {
		t.Logf("accel %s, devices bound %.1fs after boot, guest wall %.1fs", res.Accel, res.Booted.Seconds(), res.Wall.Seconds())
		t.Log("guest report:\n" + res.Report)
	}
	if err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, tail(res.Console, 4000))
	}
	if f := res.Failure(); f != "" {
		t.Fatalf("guest failed: %s\nconsole:\n%s", f, tail(res.Console, 4000))
	}
	if res.ExitCode != 0 || !strings.Contains(res.Report, "\nPASS") {
		t.Fatalf("guest tests exited %d (see the report above)", res.ExitCode)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
