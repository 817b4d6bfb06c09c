package hardware

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeSys copies testdata/sys (symlinks included) to a temp dir, so tests
// that write sysfs attributes leave the fixture alone.
func fakeSys(t *testing.T) FS {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", "sys")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return NewFS(dst)
}

func intp(n int) *int { return &n }

func TestFSPCIDevice(t *testing.T) {
	t.Parallel()
	f := NewFS(filepath.Join("testdata", "sys"))
	for _, want := range []PCIDevice{
		{Address: "0000:01:00.0", Vendor: "0x144d", Device: "0xa80a", SubsystemVendor: "0x144d", SubsystemDevice: "0xa813", Class: "0x010802",
			Driver: "nvme", IOMMUGroup: intp(14), NUMANode: intp(0), Reset: true, NVMeControllers: []string{"nvme0"}},
		{Address: "0000:02:00.0", Vendor: "0x8086", Device: "0x0b60", SubsystemVendor: "0x8086", SubsystemDevice: "0x8008", Class: "0x010802",
			Driver: "vfio-pci", IOMMUGroup: intp(15), NUMANode: intp(0), Reset: true},
		{Address: "0000:41:00.0", Vendor: "0x10de", Device: "0x20b0", SubsystemVendor: "0x10de", SubsystemDevice: "0x134f", Class: "0x030200",
			Driver: "nvidia", IOMMUGroup: intp(30), NUMANode: intp(1), Reset: true},
		{Address: "0000:3b:00.0", Vendor: "0x15b3", Device: "0x101d", SubsystemVendor: "0x15b3", SubsystemDevice: "0x0016", Class: "0x020000",
			Driver: "mlx5_core", IOMMUGroup: intp(40), NUMANode: intp(0), Reset: true, SRIOVTotalVFs: intp(8), SRIOVNumVFs: intp(0)},
		{Address: "0000:00:1f.4", Vendor: "0x8086", Device: "0xa323", SubsystemVendor: "0x8086", SubsystemDevice: "0x0000", Class: "0x0c0500",
			Driver: "i801_smbus", IOMMUGroup: intp(9)},
	} {
		got, err := f.PCIDevice(want.Address)
		if err != nil {
			t.Fatalf("%s: %v", want.Address, err)
		}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", want.Address, diff)
		}
	}
	if _, err := f.PCIDevice("0000:99:00.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("missing device: %v, want ErrNoDevice", err)
	}
	addrs, err := f.PCIAddresses()
	if err != nil || len(addrs) != 6 || addrs[0] != "0000:00:1f.4" {
		t.Errorf("PCIAddresses = %v, %v", addrs, err)
	}
	nss, err := f.NVMeNamespaces("0000:81:00.0", "nvme1")
	want := []Namespace{{Name: "nvme1n1", Size: 3750748848 * 512}, {Name: "nvme1n2", Size: 3750748848 * 512}}
	if err != nil || !cmp.Equal(want, nss) {
		t.Errorf("NVMeNamespaces = %v, %v; want %v", nss, err, want)
	}
	if m, s, fw := f.NVMeIdentity("0000:01:00.0", "nvme0"); m != "SAMSUNG MZQL23T8HCLS-00A07" || s != "S64GNE0R600123" || fw != "GDC5602Q" {
		t.Errorf("NVMeIdentity = %q %q %q", m, s, fw)
	}
}

func TestFSResetAndBind(t *testing.T) {
	t.Parallel()
	f := fakeSys(t)
	if err := f.WriteReset("0000:01:00.0"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(f.Path("bus/pci/devices/0000:01:00.0/reset")); string(b) != "1" {
		t.Errorf("reset file holds %q, want 1", b)
	}
	if err := f.WriteReset("0000:00:1f.4"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("reset without reset file: %v, want ErrUnsupported", err)
	}

	// Already bound: no writes, previous driver returned.
	if prev, err := f.Bind("0000:02:00.0", "vfio-pci"); err != nil || prev != "vfio-pci" {
		t.Errorf("Bind to current driver = %q, %v", prev, err)
	}
	// A fake tree has no kernel behind it: the writes happen, the driver
	// link does not change, and Bind says so instead of claiming success.
	prev, err := f.Bind("0000:02:00.0", "nvme")
	if prev != "vfio-pci" || err == nil || !strings.Contains(err.Error(), `bound to "vfio-pci"`) {
		t.Errorf("Bind = %q, %v", prev, err)
	}
	for path, want := range map[string]string{
		"bus/pci/devices/0000:02:00.0/driver_override": "nvme",
		"bus/pci/drivers/vfio-pci/unbind":              "0000:02:00.0",
		"bus/pci/drivers_probe":                        "0000:02:00.0",
	} {
		if b, _ := os.ReadFile(f.Path(path)); string(b) != want {
			t.Errorf("%s = %q, want %q", path, b, want)
		}
	}
}

// TestNamespaceBlock: which entries of a controller's sysfs directory are
// namespaces, and which block device each stands for.
func TestNamespaceBlock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ctrl, entry, want string
	}{
		{"nvme1", "nvme1n2", "nvme1n2"},     // no multipath
		{"nvme1", "nvme0c1n2", "nvme0n2"},   // multipath: head of subsystem 0
		{"nvme12", "nvme3c12n1", "nvme3n1"}, // numbers of more than one digit
		{"nvme1", "nvme0c5n1", "nvme0n1"},   // cntlid, as 4.x kernels named it
		{"nvme1", "nvme1n", ""},
		{"nvme1", "nvme0c1n", ""},
		{"nvme1", "nvme0c1", ""},
		{"nvme1", "nvmec1n1", ""},
		{"nvme1", "state", ""},
		{"nvme1", "ng1n1", ""}, // the char device of the generic interface
	} {
		got, ok := namespaceBlock(c.ctrl, c.entry)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("namespaceBlock(%q, %q) = %q, %v; want %q", c.ctrl, c.entry, got, ok, c.want)
		}
	}
}
