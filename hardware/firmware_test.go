package hardware

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The file checked before a flash is the one the kernel will load: a copy
// of the same name earlier in the kernel's firmware search path
// (firmware_class.path, updates/<release>, updates, <release>) wins over
// /lib/firmware/<name>, in that order.
func TestFirmwareFileFollowsTheKernelsSearchOrder(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	base := t.TempDir()
	custom := t.TempDir()
	const name, rel = "mlx/fw.bin", "6.1.0-28-amd64"
	r := &Real{fs: NewFS(sys), fwBase: base, release: rel}
	put := func(dir string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(dir), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := func(w string) {
		t.Helper()
		got, err := r.FirmwareFile(name)
		if err != nil || got != w {
			t.Fatalf("FirmwareFile = %q, %v; want %q", got, err, w)
		}
	}
	want(filepath.Join(base, name)) // none yet: the default, which reading then reports missing
	want(put(base))
	want(put(filepath.Join(base, rel)))
	want(put(filepath.Join(base, "updates")))
	want(put(filepath.Join(base, "updates", rel)))
	param := filepath.Join(sys, "module", "firmware_class", "parameters", "path")
	if err := os.MkdirAll(filepath.Dir(param), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(param, []byte("\n"), 0o644); err != nil { // unset: skipped
		t.Fatal(err)
	}
	want(filepath.Join(base, "updates", rel, name))
	if err := os.WriteFile(param, []byte(custom+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want(put(custom))
	if _, err := r.FirmwareFile("/abs/fw.bin"); err == nil {
		t.Error("an absolute image name was accepted")
	}
	// A firmware_class.path this scourd cannot see (a container without
	// it mounted): the kernel's first choice would go unchecked.
	if err := os.WriteFile(param, []byte(filepath.Join(custom, "missing")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := r.FirmwareFile(name); err == nil || !strings.Contains(err.Error(), "firmware_class.path") {
		t.Errorf("FirmwareFile with an unreadable firmware_class.path = %q, %v; want an error naming it", got, err)
	}
}
