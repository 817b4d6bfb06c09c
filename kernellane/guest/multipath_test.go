//go:build kernelguest

package guest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/kernellane"
)

// TestMultipath (booted by the host's TestGuestMultipath): a controller
// in an NVM subsystem, which the kernel shows through native multipath.
// Its own sysfs directory then holds only hidden path nodes
// nvme<S>c<C>nN; BindDriver must still see the namespaces come up (it
// waited 30 s and failed before), and namespace discovery must name the
// subsystem's block devices nvme<S>nN.
func TestMultipath(t *testing.T) {
	d := kernellane.MultipathMachine()[0]
	if _, err := os.Stat(filepath.Join("/sys/bus/pci/devices", d.Addr)); err != nil {
		t.Skipf("no %s: this guest was not booted with kernellane.MultipathMachine", d.Addr)
	}
	r := real(t)
	addr := hardware.Address(d.Addr)
	if _, err := r.BindDriver(ctx, addr, "nvme"); err != nil {
		t.Fatalf("bind %s (%s) to nvme: %v", d.Addr, d.Serial, err)
	}
	defer bind(t, d, "vfio-pci")
	paths, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", d.Addr, "nvme", "nvme*", "nvme*c*n*"))
	if len(paths) != len(d.SizesMiB) {
		t.Fatalf("path nodes %v, want %d: the kernel does not use native multipath for this controller, so this test proves nothing", paths, len(d.SizesMiB))
	}
	ctrl := filepath.Base(filepath.Dir(paths[0]))
	nss, err := hardware.NewFS("").NVMeNamespaces(addr, ctrl)
	if err != nil || len(nss) != len(d.SizesMiB) {
		t.Fatalf("NVMeNamespaces(%s, %s) = %v, %v; want %d (path nodes %v)", addr, ctrl, nss, err, len(d.SizesMiB), paths)
	}
	for i, ns := range nss {
		if strings.Contains(ns.Name, "c") || ns.Size != int64(d.SizesMiB[i])<<20 {
			t.Errorf("namespace %d: %+v, want the subsystem's block device of %d MiB", i+1, ns, d.SizesMiB[i])
		}
		if fi, err := os.Stat("/dev/" + ns.Name); err != nil || fi.Mode()&os.ModeDevice == 0 {
			t.Errorf("/dev/%s: %v, %v; want a block device", ns.Name, fi, err)
		}
	}
	m, err := r.Media(ctx, addr)
	if err != nil || len(m) != len(nss) {
		t.Fatalf("media: %v, %v; want %v", m, err, nss)
	}
	// nvme list orders a subsystem's namespaces as it likes.
	slices.SortFunc(m, func(a, b hardware.Media) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(nss, func(a, b hardware.Namespace) int { return strings.Compare(a.Name, b.Name) })
	for i := range m {
		if m[i].Path != "/dev/"+nss[i].Name || m[i].Size != nss[i].Size {
			t.Errorf("media %d: %+v, want /dev/%s of %d bytes", i, m[i], nss[i].Name, nss[i].Size)
		}
	}
}
