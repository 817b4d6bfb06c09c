package kernellane

import (
	"bytes"
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
	runGuestTests(t, Boot{Assets: dir, Dir: t.TempDir(), Disks: Machine(), Cmdline: cmdline}, "\nPASS")
}

// TestGuestMultipath boots MultipathMachine and runs the guest's
// TestMultipath: a drive the kernel shows through native multipath
// (hidden path node nvme<S>c<C>nN, block device nvme<S>nN) comes up on
// nvme through BindDriver, and its namespaces are found. A skip in the
// guest (no multipath device) does not pass here.
func TestGuestMultipath(t *testing.T) {
	b := Boot{Assets: assets(t), Dir: t.TempDir(), Disks: MultipathMachine(), Cmdline: []string{"scour.run=tests", "scour.test=^TestMultipath$"}}
	runGuestTests(t, b, "--- PASS: TestMultipath")
}

// TestGuestHiddenNamespace boots HiddenNamespaceMachine and runs the
// guest's TestHiddenNamespace: on a two-controller subsystem with
// namespace management, the nvme-format step refuses a namespace attached
// to no controller, and goes on once it is attached to the other
// controller, with scour reading `nvme list-ctrl` from real nvme-cli and
// QEMU. A skip in the guest does not pass here. The hidden namespace's
// image holds tenant data from before boot, which must still be there:
// scour formats only its own namespace.
func TestGuestHiddenNamespace(t *testing.T) {
	b := Boot{Assets: assets(t), Dir: t.TempDir(), Disks: HiddenNamespaceMachine(), Cmdline: []string{"scour.run=tests", "scour.test=^TestHiddenNamespace$"}}
	d := b.Disks[0]
	img := ImagePath(b.Dir, d, 2)
	data := bytes.Repeat([]byte("HIDDEN-TENANT-NSID-2;"), 200)
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(d.SizesMiB[1]) << 20
	for _, off := range []int64{0, size - int64(len(data))} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	runGuestTests(t, b, "--- PASS: TestHiddenNamespace")
	after, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(after)) != size || !bytes.Equal(after[:len(data)], data) || !bytes.Equal(after[size-int64(len(data)):], data) {
		t.Errorf("NSID 2's image %s lost its data (%d bytes): scour formatted a namespace that was not its own", img, len(after))
	}
}

// runGuestTests boots b and fails with the guest's report unless its
// tests exited 0 and the report contains passed.
func runGuestTests(t *testing.T, b Boot, passed string) {
	t.Helper()
	res, err := Run(context.Background(), b)
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
	if res.ExitCode != 0 || !strings.Contains(res.Report, passed) {
		t.Fatalf("guest tests exited %d without %q in the report (see it above)", res.ExitCode, passed)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
