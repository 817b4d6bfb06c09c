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
	toVFIO := func() { offNVMe(t, fs, addr) }
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

// vpdBytes builds VPD: identifier string, VPD-R with PN and SN, end tag.
func vpdBytes(product, serial string) []byte {
	large := func(tag byte, data []byte) []byte {
		return append([]byte{tag, byte(len(data)), byte(len(data) >> 8)}, data...)
	}
	kw := func(k, v string) []byte { return append([]byte{k[0], k[1], byte(len(v))}, v...) }
	ro := append(kw("PN", "MZQL23T8HCLS"), kw("SN", serial)...)
	ro = append(ro, kw("RV", "\x00")...)
	b := append(large(0x82, []byte(product)), large(0x90, ro)...)
	return append(b, 0x78)
}

func TestParseVPD(t *testing.T) {
	v, err := ParseVPD(vpdBytes("SAMSUNG PM9A3 3.84TB ", "S64GNE0R600123"))
	if err != nil || v.Serial != "S64GNE0R600123" || v.Product != "SAMSUNG PM9A3 3.84TB" {
		t.Fatalf("%+v, %v", v, err)
	}
	if _, err := ParseVPD([]byte{0x82, 0x10, 0x00, 'x'}); err == nil {
		t.Fatal("truncated VPD parsed")
	}
}

// TestRealNamesVFIOBoundNVMeFromVPD: a drive with PCI VPD is named on
// vfio-pci by a fresh backend, without ever binding nvme.
func TestRealNamesVFIOBoundNVMeFromVPD(t *testing.T) {
	fs := fakeSys(t)
	const addr = Address("0000:02:00.0") // vfio-bound in the fixture
	if err := os.WriteFile(fs.devPath(addr, "vpd"), vpdBytes("SAMSUNG PM9A3 3.84TB", "S64GNE0R600999"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := newTestReal(t, Config{SysfsRoot: string(fs)}, fixtureRunner(t, nil)).Discover(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "vfio-pci" || d.Serial != "S64GNE0R600999" || d.Model != "SAMSUNG PM9A3 3.84TB" {
		t.Fatalf("driver %s serial %q model %q", d.Driver, d.Serial, d.Model)
	}
}
