package hardware

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dflSys builds the sysfs of an Intel PAC N3000 (class 0x120000) bound to
// dfl-pci the way drivers/fpga/dfl*.c and fpga-mgr.c/fpga-region.c lay it
// out, symlinks included: the card's region0 holds dfl-fme.0 (bitstream_id,
// bitstream_metadata, the FME manager fpga0 and the PR region region1 with
// its compat_id) and the port dfl-port.0. subsystem links lead back up the
// tree: a walk that followed them would never end.
func dflSys(t *testing.T) (FS, Address) {
	t.Helper()
	root := t.TempDir()
	addr := Address("0000:5e:00.0")
	dev := filepath.Join(root, "devices", "pci0000:5d", "0000:5d:00.0", string(addr))
	fme := filepath.Join(dev, "fpga_region", "region0", "dfl-fme.0")
	files := map[string]string{
		"vendor": "0x8086", "device": "0x0b30", "subsystem_vendor": "0x8086", "subsystem_device": "0x0010", "class": "0x120000",
		"numa_node": "0", "reset": "",
		"fpga_region/region0/dfl-fme.0/bitstream_id":                                   "0x23000410010310",
		"fpga_region/region0/dfl-fme.0/bitstream_metadata":                             "0x1402211",
		"fpga_region/region0/dfl-fme.0/ports_num":                                      "1",
		"fpga_region/region0/dfl-fme.0/dfl-fme-mgr.0/fpga_manager/fpga0/name":          "DFL FME FPGA Manager",
		"fpga_region/region0/dfl-fme.0/dfl-fme-mgr.0/fpga_manager/fpga0/state":         "operating",
		"fpga_region/region0/dfl-fme.0/dfl-fme-mgr.0/fpga_manager/fpga0/status":        "",
		"fpga_region/region0/dfl-fme.0/dfl-fme-region.1/fpga_region/region1/compat_id": "f3c9941350814aadbced07eb84a6d0bb",
		"fpga_region/region0/dfl-port.0/afu_id":                                        "d8424dc4a4a3c413f89e433683f9040b",
	}
	for name, v := range files {
		p := filepath.Join(dev, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(root, "bus", "pci", "devices", string(addr)):             "../../../devices/pci0000:5d/0000:5d:00.0/" + string(addr),
		filepath.Join(dev, "driver"):                                           "../../../../bus/pci/drivers/dfl-pci",
		filepath.Join(dev, "fpga_region", "region0", "subsystem"):              "../../../../../../class/fpga_region",
		filepath.Join(fme, "subsystem"):                                        "../../../../../../../bus/dfl",
		filepath.Join(fme, "dfl-fme-mgr.0", "fpga_manager", "fpga0", "device"): "../../../dfl-fme-mgr.0",
		filepath.Join(root, "class", "fpga_region", "region0"):                 "../../devices/pci0000:5d/0000:5d:00.0/" + string(addr) + "/fpga_region/region0",
	}
	for link, target := range links {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return NewFS(root), addr
}

func TestFPGAFromDFLSysfs(t *testing.T) {
	fsys, addr := dflSys(t)
	got, err := fsys.FPGA(addr)
	if err != nil {
		t.Fatal(err)
	}
	want := &FPGAInfo{
		Regions: []FPGARegion{
			{Name: "region0", LoadedID: "0x23000410010310"},
			{Name: "region1", CompatID: "f3c9941350814aadbced07eb84a6d0bb"},
		},
		Managers:          []FPGAManager{{Device: "fpga0", Name: "DFL FME FPGA Manager", State: "operating"}},
		BitstreamID:       "0x23000410010310",
		BitstreamMetadata: "0x1402211",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("FPGA (-want +got):\n%s", d)
	}
}

func TestRealDiscoversFPGA(t *testing.T) {
	fsys, addr := dflSys(t)
	r, err := NewReal(Config{SysfsRoot: string(fsys)}, WithRunner(&FakeRunner{}))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := r.Discover(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Kind != KindFPGA {
		t.Fatalf("kind %q, want fpga (class 0x120000)", dev.Kind)
	}
	for name, want := range map[string]Value{
		"kind": Set("fpga"), "fpga.regions": Ordered("2"), "fpga.manager": Bool(true), "fpga.dfl": Bool(true),
		"fpga.bitstream_id": Set("0x23000410010310"), "fpga.compat_id": Set("f3c9941350814aadbced07eb84a6d0bb"),
	} {
		if got := dev.Capabilities[name]; !got.Equal(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Bounded traits: the kind and two flags; ids and counts never.
	wantTraits := []string{"P_FPGA_DFL", "P_FPGA_MANAGER", "P_KIND_FPGA", "P_PCI_RESET"}
	if d := cmp.Diff(wantTraits, dev.Capabilities.Traits("P_")); d != "" {
		t.Errorf("traits (-want +got):\n%s", d)
	}
	id, err := r.FPGALoadedID(context.Background(), addr, "region0")
	if err != nil || id != "0x23000410010310" {
		t.Errorf("FPGALoadedID(region0) = %q, %v; want the FME's bitstream_id", id, err)
	}
	if _, err := r.FPGALoadedID(context.Background(), addr, "region1"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("FPGALoadedID(region1) err = %v, want ErrUnsupported (sysfs says nothing about a PR region's contents)", err)
	}
	if err := r.ProgramFPGA(context.Background(), addr, "region1", FPGAImage{}, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ProgramFPGA err = %v, want ErrUnsupported (no kernel interface: a vendor tool plugin does it)", err)
	}
}

func TestKindFromClassFPGA(t *testing.T) {
	for class, want := range map[string]DeviceKind{"0x120000": KindFPGA, "0x120001": KindFPGA, "0x110000": KindGeneric} {
		if got := KindFromClass(class); got != want {
			t.Errorf("KindFromClass(%s) = %s, want %s", class, got, want)
		}
	}
}
