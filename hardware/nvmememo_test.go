package hardware

import (
	"context"
	"os"
	"testing"
)

// TestRealRemembersNVMeIdentityOffNVMe: a drive seen once on nvme keeps
// its serial, model and erase capabilities (not its SMART values) when it
// is back on vfio-pci, where the kernel shows none of them; a different
// card in the slot is not mistaken for it.
func TestRealRemembersNVMeIdentityOffNVMe(t *testing.T) {
	ctx := context.Background()
	fs := fakeSys(t)
	b := newTestReal(t, Config{SysfsRoot: string(fs)}, fixtureRunner(t, nil))
	const addr = Address("0000:01:00.0")
	toVFIO := func() {
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
	if _, err := b.Discover(ctx, addr); err != nil { // on nvme
		t.Fatal(err)
	}
	toVFIO()
	d, err := b.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if d.Serial != "S64GNE0R600123" || d.Model != "SAMSUNG MZQL23T8HCLS-00A07" || !d.NVMe.Remembered || !d.NVMe.BoundToVFIO {
		t.Fatalf("vfio-bound after a look on nvme: serial %q model %q nvme %+v", d.Serial, d.Model, d.NVMe)
	}
	if !d.Capabilities["nvme.sanitize"].Equal(Ordered("block", "crypto")) || !d.Capabilities["nvme.format"].Equal(Bool(true)) {
		t.Fatalf("remembered capabilities %v", d.Capabilities)
	}
	if _, ok := d.Capabilities["nvme.percent_used"]; ok || d.Absent["nvme.percent_used"] == "" {
		t.Fatalf("SMART remembered: %v", d.Capabilities)
	}
	if _, ok := d.Capabilities["nvme.block_device"]; !ok || d.Capabilities["nvme.block_device"].Bool {
		t.Fatal("a vfio-bound device claims block devices")
	}

	// Another card in the same slot: nothing recalled.
	if err := os.WriteFile(fs.devPath(addr, "device"), []byte("0xa824\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err = b.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if d.Serial != "" || d.NVMe.Remembered {
		t.Fatalf("another card took the old one's identity: %q", d.Serial)
	}
	// A fresh backend (another process) knows nothing either.
	d, _ = newTestReal(t, Config{SysfsRoot: string(fs)}, fixtureRunner(t, nil)).Discover(ctx, addr)
	if d.Serial != "" {
		t.Fatalf("fresh backend: serial %q", d.Serial)
	}
}
