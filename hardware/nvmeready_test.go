package hardware

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// offNVMe puts fake device addr on vfio-pci with no controller in sysfs,
// as it is before a bind to nvme.
func offNVMe(t *testing.T, fs FS, addr Address) {
	t.Helper()
	link := fs.devPath(addr, "driver")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../bus/pci/drivers/vfio-pci", link); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(fs.devPath(addr, "nvme")); err != nil {
		t.Fatal(err)
	}
}

// probeSteps are what the kernel does after drivers_probe, in order: the
// controller appears "connecting", goes live, then its namespaces appear
// one by one.
func probeSteps(fs FS, addr Address, namespaces ...string) []func() error {
	ctrl := fs.devPath(addr, "nvme", "nvme1")
	steps := []func() error{
		func() error {
			link := fs.devPath(addr, "driver")
			if err := os.Remove(link); err != nil {
				return err
			}
			if err := os.Symlink("../../../../bus/pci/drivers/nvme", link); err != nil {
				return err
			}
			if err := os.MkdirAll(ctrl, 0o755); err != nil {
				return err
			}
			return os.WriteFile(ctrl+"/state", []byte("connecting\n"), 0o644)
		},
		func() error { return os.WriteFile(ctrl+"/state", []byte("live\n"), 0o644) },
	}
	for _, ns := range namespaces {
		steps = append(steps, func() error {
			if err := os.MkdirAll(ctrl+"/"+ns, 0o755); err != nil {
				return err
			}
			return os.WriteFile(ctrl+"/"+ns+"/size", []byte("7501476528\n"), 0o644)
		})
	}
	return steps
}

// probeLater plays the kernel after drivers_probe while the test waits:
// probeSteps 60 ms apart, so that the wait sees each state. The wait it
// meets ends on the final state, however late it comes.
func probeLater(t *testing.T, fs FS, addr Address, namespaces ...string) {
	t.Helper()
	steps := probeSteps(fs, addr, namespaces...)
	go func() {
		for _, f := range steps {
			time.Sleep(60 * time.Millisecond)
			if err := f(); err != nil {
				t.Error(err)
			}
		}
	}()
}

// probeDone plays the kernel's probe to its end before the test waits.
func probeDone(t *testing.T, fs FS, addr Address, namespaces ...string) {
	t.Helper()
	for _, f := range probeSteps(fs, addr, namespaces...) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

func listNSRunner(t *testing.T, out string, err error) *FakeRunner {
	return fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		if cmd == "nvme list-ns /dev/nvme1" {
			return []byte(out), err, true
		}
		return nil, nil, false
	})
}

// TestWaitNVMeReadyWaitsForEveryNamespace: on a real kernel a
// two-namespace drive had no block device 0.2 s after its bind to nvme,
// and the format step that followed found no media and quarantined a
// healthy drive. The wait returns only once the controller is live and
// every namespace nvme list-ns names has its block device.
func TestWaitNVMeReadyWaitsForEveryNamespace(t *testing.T) {
	t.Parallel()
	fs := fakeSys(t)
	const addr = Address("0000:81:00.0") // nvme1 with nvme1n1 and nvme1n2
	offNVMe(t, fs, addr)
	b := newTestReal(t, Config{SysfsRoot: string(fs)}, listNSRunner(t, "[   0]:0x1\n[   1]:0x2\n", nil))
	probeLater(t, fs, addr, "nvme1n1", "nvme1n2")
	if err := b.waitNVMeReady(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	m, err := b.Media(context.Background(), addr)
	if err != nil || len(m) != 2 {
		t.Fatalf("media right after the wait: %v, %v; want both namespaces", m, err)
	}
}

// TestWaitNVMeReadyTimesOutRetryably: a namespace that never appears ends
// the wait with an error that says what is missing and is not
// "unsupported" (which would quarantine the drive).
func TestWaitNVMeReadyTimesOutRetryably(t *testing.T) {
	t.Parallel()
	fs := fakeSys(t)
	const addr = Address("0000:81:00.0")
	offNVMe(t, fs, addr)
	b := newTestReal(t, Config{SysfsRoot: string(fs)}, listNSRunner(t, "[   0]:0x1\n[   1]:0x2\n", nil), WithNVMeReadyTimeout(100*time.Millisecond))
	// The probe has ended, with nvme1n2 missing, before the wait starts:
	// a probe racing the timeout would make the reason depend on how
	// far it got on a loaded machine.
	probeDone(t, fs, addr, "nvme1n1")
	err := b.waitNVMeReady(context.Background(), addr)
	if err == nil || !strings.Contains(err.Error(), "1 of the controller's 2 active namespaces") || errors.Is(err, ErrUnsupported) {
		t.Fatalf("wait with a namespace missing: %v", err)
	}
}

// TestWaitNVMeReadyWithoutListNS: when nvme-cli cannot list namespaces,
// a live controller is all the wait can check.
func TestWaitNVMeReadyWithoutListNS(t *testing.T) {
	t.Parallel()
	fs := fakeSys(t)
	const addr = Address("0000:81:00.0")
	offNVMe(t, fs, addr)
	b := newTestReal(t, Config{SysfsRoot: string(fs)}, listNSRunner(t, "", &ToolError{Cmd: "nvme list-ns", ExitCode: 1}))
	probeLater(t, fs, addr)
	if err := b.waitNVMeReady(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.ReadFile(fs.devPath(addr, "nvme", "nvme1", "state")); string(st) != "live\n" {
		t.Fatalf("returned before the controller was live: state %q", st)
	}
}

// multipathLive lays out addr as a kernel with native NVMe multipath
// shows a live controller nvme1 in subsystem 2: the controller directory
// holds only the hidden path nodes nvme2c1nN, and the block devices are
// the subsystem's heads nvme2nN under devices/virtual/nvme-subsystem.
func multipathLive(t *testing.T, fs FS, addr Address, nsids ...string) {
	t.Helper()
	link := fs.devPath(addr, "driver")
	ctrl := fs.devPath(addr, "nvme", "nvme1")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(link))
	must(os.Symlink("../../../../bus/pci/drivers/nvme", link))
	must(os.MkdirAll(ctrl, 0o755))
	must(os.WriteFile(ctrl+"/state", []byte("live\n"), 0o644))
	for _, n := range nsids {
		must(os.MkdirAll(ctrl+"/nvme2c1n"+n, 0o755)) // no size: not a block device
		head := fs.Path("devices", "virtual", "nvme-subsystem", "nvme-subsys2", "nvme2n"+n)
		must(os.MkdirAll(head, 0o755))
		must(os.WriteFile(head+"/size", []byte("7501476528\n"), 0o644))
		must(os.Symlink("../devices/virtual/nvme-subsystem/nvme-subsys2/nvme2n"+n, fs.Path("block", "nvme2n"+n)))
	}
}

// TestWaitNVMeReadyMultipath: with native multipath (on by default in
// Debian, Ubuntu and RHEL kernels, used for dual-port and many SR-IOV
// drives) the controller's sysfs directory never holds <ctrl>nN, so the
// wait after every bind to nvme ran out and the step failed on every
// try, leaving the drive reserved for good. The path nodes count, and
// the media are the subsystem's block devices.
func TestWaitNVMeReadyMultipath(t *testing.T) {
	t.Parallel()
	fs := fakeSys(t)
	const addr = Address("0000:81:00.0")
	offNVMe(t, fs, addr)
	multipathLive(t, fs, addr, "1", "2")
	r := fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		switch cmd {
		case "nvme list-ns /dev/nvme1":
			return []byte("[   0]:0x1\n[   1]:0x2\n"), nil, true
		case "nvme list -v -o json": // the sysfs fallback is under test
			return nil, &ToolError{Cmd: cmd, ExitCode: 1}, true
		}
		return nil, nil, false
	})
	b := newTestReal(t, Config{SysfsRoot: string(fs)}, r, WithNVMeReadyTimeout(time.Second))
	if err := b.waitNVMeReady(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	m, err := b.Media(context.Background(), addr)
	want := []Media{{Path: "/dev/nvme2n1", Size: 7501476528 * 512}, {Path: "/dev/nvme2n2", Size: 7501476528 * 512}}
	if err != nil || len(m) != 2 || m[0] != want[0] || m[1] != want[1] {
		t.Fatalf("media of a multipath drive: %v, %v; want %v", m, err, want)
	}
}
