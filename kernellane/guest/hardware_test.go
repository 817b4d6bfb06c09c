//go:build kernelguest

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/hardwaretest"
	"github.com/scour-project/scour/kernellane"
)

// TestConformance runs the suite every Backend passes (hardwaretest) on
// the real backend against the real kernel: one controller bound to nvme,
// one still on vfio-pci; the guest has no GPU or NIC.
func TestConformance(t *testing.T) {
	nv, vf := disk(t, "SCOUR512"), disk(t, "SCOUR4K")
	bind(t, nv, "nvme")
	defer bind(t, nv, "vfio-pci")
	hardwaretest.Run(t, real(t), hardwaretest.Layout{NVMe: hardware.Address(nv.Addr), VFIO: hardware.Address(vf.Addr), Missing: "0000:99:00.0", Rebind: true})
}

// TestDiscovery: what discovery says of each controller on vfio-pci
// before the backend ever saw it on nvme (serial and model unknown, with
// the reason), bound to nvme, then back on vfio-pci (one backend, as in
// scourd: serial and model seen on nvme stay known, hardware.NVMeMemo):
// address, class,
// driver, IOMMU group, serial and model as QEMU reports them, namespaces,
// QEMU's capability bits and smart log.
func TestDiscovery(t *testing.T) {
	r := real(t)
	addrs, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range kernellane.Machine() {
		t.Run(d.Serial, func(t *testing.T) {
			if !slices.Contains(addrs, hardware.Address(d.Addr)) {
				t.Fatalf("List lacks %s: %v", d.Addr, addrs)
			}
			// Before this backend saw it on nvme: on vfio-pci the kernel
			// shows no Identify data and QEMU's function has no VPD, so
			// serial and model are unknown, and discovery says why.
			bind(t, d, "vfio-pci")
			dev, err := r.Discover(ctx, hardware.Address(d.Addr))
			if err != nil {
				t.Fatal(err)
			}
			if dev.Serial != "" || dev.Model != "" || !strings.Contains(dev.Absent["nvme.model"], "vfio-pci") {
				t.Errorf("vfio-pci, never seen on nvme: serial %q model %q, absent nvme.model %q; want unknown, with the driver as the reason", dev.Serial, dev.Model, dev.Absent["nvme.model"])
			}
			for _, drv := range []string{"nvme", "vfio-pci"} {
				if _, err := r.BindDriver(ctx, hardware.Address(d.Addr), drv); err != nil {
					t.Fatal(err)
				}
				if drv == "nvme" {
					waitNamespaces(t, d)
				}
				dev, err := r.Discover(ctx, hardware.Address(d.Addr))
				if err != nil {
					t.Fatal(err)
				}
				if dev.Kind != hardware.KindNVMe || dev.Class != "0x010802" || dev.Driver != drv || dev.VendorID != "0x1b36" || dev.DeviceID != "0x0010" {
					t.Errorf("%s: kind %s class %s driver %s id %s:%s", drv, dev.Kind, dev.Class, dev.Driver, dev.VendorID, dev.DeviceID)
				}
				if dev.IOMMUGroup == nil {
					t.Errorf("%s: no IOMMU group", drv)
				}
				if dev.Serial != d.Serial || dev.Model != "QEMU NVMe Ctrl" {
					t.Errorf("%s: serial %q model %q, want %q and QEMU NVMe Ctrl", drv, dev.Serial, dev.Model, d.Serial)
				}
				if dev.NVMe == nil {
					t.Fatalf("%s: no NVMe facts", drv)
				}
				if drv == "vfio-pci" {
					if !dev.NVMe.BoundToVFIO || dev.Absent["nvme.sanitize"] == "" {
						t.Errorf("vfio-pci: BoundToVFIO %v absent %v", dev.NVMe.BoundToVFIO, dev.Absent)
					}
					continue
				}
				if len(dev.NVMe.Namespaces) != len(d.SizesMiB) || dev.NVMe.OACS&2 == 0 || dev.NVMe.SANICAP != 0 {
					t.Errorf("nvme: namespaces %v oacs %#x sanicap %#x", dev.NVMe.Namespaces, dev.NVMe.OACS, dev.NVMe.SANICAP)
				}
				if dev.NVMe.Smart == nil || dev.NVMe.Smart.CriticalWarning != d.Warning {
					t.Errorf("nvme: smart log %+v, want critical warning %#x", dev.NVMe.Smart, d.Warning)
				}
				for i, ns := range dev.NVMe.Namespaces {
					lbs, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(ns), "queue/logical_block_size"))
					if strings.TrimSpace(string(lbs)) != strconv.Itoa(d.BlockSize) {
						t.Errorf("%s (namespace %d): logical block size %s, want %d", ns, i+1, lbs, d.BlockSize)
					}
				}
			}
		})
	}
}

// TestRebind: vfio-pci -> nvme -> vfio-pci through BindDriver, with the
// namespaces' block devices appearing and going away.
func TestRebind(t *testing.T) {
	d := disk(t, "SCOURTWONS")
	r := real(t)
	for _, step := range []struct{ to, prev string }{{"nvme", "vfio-pci"}, {"vfio-pci", "nvme"}} {
		prev, err := r.BindDriver(ctx, hardware.Address(d.Addr), step.to)
		if err != nil || prev != step.prev || driver(d.Addr) != step.to {
			t.Fatalf("bind to %s: previous %q err %v, now %q", step.to, prev, err, driver(d.Addr))
		}
		if step.to == "nvme" {
			waitNamespaces(t, d)
		} else if ns := namespaces(d.Addr); len(ns) != 0 {
			t.Errorf("namespaces %v still there on vfio-pci", ns)
		}
	}
}

// TestFLR: QEMU's NVMe reports reset_method flr; ResetFunction resets it
// through sysfs while bound to vfio-pci and to nvme, and the controller
// answers afterwards.
func TestFLR(t *testing.T) {
	d := disk(t, "SCOUR4K")
	m, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", d.Addr, "reset_method"))
	if err != nil || !strings.Contains(string(m), "flr") {
		t.Fatalf("reset_method %q, %v: want flr", m, err)
	}
	r := real(t)
	if err := r.ResetFunction(ctx, hardware.Address(d.Addr)); err != nil {
		t.Fatalf("reset while on vfio-pci: %v", err)
	}
	bind(t, d, "nvme")
	defer bind(t, d, "vfio-pci")
	if err := r.ResetFunction(ctx, hardware.Address(d.Addr)); err != nil {
		t.Fatalf("reset while on nvme: %v", err)
	}
	if _, err := r.SmartLog(ctx, hardware.Address(d.Addr)); err != nil {
		t.Errorf("controller does not answer after the reset: %v", err)
	}
}

// TestResetEscalating: the chosen-method reset (pci-reset args.methods)
// against the real kernel's reset_method: FLR is selected, done, and the
// method list written back as it was; a bus reset is refused, since
// QEMU's controllers sit on the root bus with no bridge above them.
func TestResetEscalating(t *testing.T) {
	d := disk(t, "SCOUR4K")
	sel := filepath.Join("/sys/bus/pci/devices", d.Addr, "reset_method")
	before, err := os.ReadFile(sel)
	if err != nil {
		t.Fatal(err)
	}
	r := real(t)
	det, err := r.ResetEscalating(ctx, hardware.Address(d.Addr), []string{"flr", "bus"})
	if err != nil || det["method"] != "flr" {
		t.Fatalf("flr, bus: %v, details %v", err, det)
	}
	if after, _ := os.ReadFile(sel); string(after) != string(before) {
		t.Errorf("reset_method %q after the reset, was %q", after, before)
	}
	det, err = r.ResetEscalating(ctx, hardware.Address(d.Addr), []string{"bus"})
	if !errors.Is(err, hardware.ErrUnsupported) {
		t.Errorf("bus reset of a root-bus device: %v (details %v), want refused as unsupported", err, det)
	}
	if after, _ := os.ReadFile(sel); string(after) != string(before) {
		t.Errorf("reset_method %q after a refused bus reset, was %q", after, before)
	}
	bind(t, d, "nvme")
	defer bind(t, d, "vfio-pci")
	if _, err := r.SmartLog(ctx, hardware.Address(d.Addr)); err != nil {
		t.Errorf("controller does not answer after the reset: %v", err)
	}
}
