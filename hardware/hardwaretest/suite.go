// Package hardwaretest is the conformance suite every hardware.Backend
// passes: the real backend over the fake sysfs and recorded tool outputs,
// and the simulator. Behaviour the pipeline relies on is checked here once.
package hardwaretest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// Layout names the devices of the backend under test.
type Layout struct {
	NVMe    hardware.Address // bound to nvme, sanicap has block, oacs has format
	VFIO    hardware.Address // an NVMe bound to vfio-pci
	GPU     hardware.Address // "" when the host has none (the QEMU guest)
	NIC     hardware.Address // with devlink firmware versions; "" when none
	Missing hardware.Address // not on this host
	// Rebind: BindDriver really moves devices (the simulator, a real
	// kernel); false over a fake sysfs tree.
	Rebind bool
}

// present drops the devices the layout does not have.
func (l Layout) present(m map[hardware.Address]hardware.DeviceKind) map[hardware.Address]hardware.DeviceKind {
	delete(m, "")
	return m
}

// Run checks b against the Backend contract.
func Run(t *testing.T, b hardware.Backend, l Layout) {
	ctx := context.Background()
	t.Run("List", func(t *testing.T) {
		addrs, err := b.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[hardware.Address]bool{}
		for _, a := range addrs {
			seen[a] = true
		}
		for _, a := range []hardware.Address{l.NVMe, l.VFIO, l.GPU, l.NIC} {
			if a != "" && !seen[a] {
				t.Errorf("List lacks %s: %v", a, addrs)
			}
		}
		if seen[l.Missing] {
			t.Errorf("List has %s", l.Missing)
		}
	})
	t.Run("DiscoverMissing", func(t *testing.T) {
		if _, err := b.Discover(ctx, l.Missing); !errors.Is(err, hardware.ErrNoDevice) {
			t.Errorf("Discover(%s) = %v, want ErrNoDevice", l.Missing, err)
		}
	})
	t.Run("DiscoverKinds", func(t *testing.T) {
		for addr, kind := range l.present(map[hardware.Address]hardware.DeviceKind{l.GPU: hardware.KindGPU, l.NIC: hardware.KindNIC, l.NVMe: hardware.KindNVMe, l.VFIO: hardware.KindNVMe}) {
			d, err := b.Discover(ctx, addr)
			if err != nil {
				t.Fatalf("Discover(%s): %v", addr, err)
			}
			if d.Address != addr || d.Kind != kind || !d.Capabilities["kind"].Equal(hardware.Set(string(kind))) {
				t.Errorf("Discover(%s): address %s kind %s capability %v", addr, d.Address, d.Kind, d.Capabilities["kind"])
			}
			for name := range d.Absent {
				if _, ok := d.Capabilities[name]; ok && !isDeclared(name) {
					t.Errorf("%s: %s is both set and absent (%s)", addr, name, d.Absent[name])
				}
			}
		}
	})
	t.Run("NVMe", func(t *testing.T) {
		d, err := b.Discover(ctx, l.NVMe)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Capabilities["nvme.block_device"].Equal(hardware.Bool(true)) || !d.Capabilities["pci.driver"].Equal(hardware.Set("nvme")) {
			t.Errorf("capabilities %v", d.Capabilities)
		}
		media, err := b.Media(ctx, l.NVMe)
		if err != nil || len(media) == 0 {
			t.Fatalf("Media = %v, %v", media, err)
		}
		for _, m := range media {
			if m.Size <= 0 || m.Path == "" {
				t.Errorf("media %+v", m)
			}
		}
		if err := b.Format(ctx, l.NVMe, media[0].Path, 0); err == nil {
			t.Error("Format -s 0 accepted: it erases nothing")
		}
		if err := b.Format(ctx, l.NVMe, "/dev/nvme99n1", 1); err == nil {
			t.Error("Format of a namespace of another device accepted")
		}
		// A controller without block erase (QEMU's: sanicap 0) must refuse
		// it as unsupported, never report it done.
		if slices.Contains(hardware.SanitizeMethods(d.NVMe.SANICAP), "block") {
			if err := b.Sanitize(ctx, l.NVMe, hardware.SanitizeBlock, 1, nil); err != nil {
				t.Errorf("block sanitize: %v", err)
			}
		} else if err := b.Sanitize(ctx, l.NVMe, hardware.SanitizeBlock, 1, nil); !errors.Is(err, hardware.ErrUnsupported) {
			t.Errorf("block sanitize on sanicap %#x: %v, want ErrUnsupported", d.NVMe.SANICAP, err)
		}
		if _, err := b.SmartLog(ctx, l.NVMe); err != nil {
			t.Errorf("SmartLog: %v", err)
		}
	})
	t.Run("VFIOBound", func(t *testing.T) {
		d, err := b.Discover(ctx, l.VFIO)
		if err != nil {
			t.Fatal(err)
		}
		if d.NVMe == nil || !d.NVMe.BoundToVFIO || d.Absent["nvme.sanitize"] == "" || !d.Capabilities["nvme.block_device"].Equal(hardware.Bool(false)) {
			t.Errorf("vfio-bound NVMe: %+v absent %v", d.NVMe, d.Absent)
		}
		if _, err := b.Media(ctx, l.VFIO); !errors.Is(err, hardware.ErrWrongDriver) {
			t.Errorf("Media: %v, want ErrWrongDriver", err)
		}
		if err := b.Sanitize(ctx, l.VFIO, hardware.SanitizeBlock, 1, nil); !errors.Is(err, hardware.ErrWrongDriver) {
			t.Errorf("Sanitize: %v, want ErrWrongDriver", err)
		}
	})
	t.Run("RememberedOnVFIO", func(t *testing.T) {
		if !l.Rebind {
			t.Skip("this layout cannot rebind devices (fake sysfs): Layout.Rebind false")
		}
		rememberedOnVFIO(t, b, l.VFIO)
	})
	t.Run("Unsupported", func(t *testing.T) {
		if err := b.ScrubGPU(ctx, l.NVMe, nil); !errors.Is(err, hardware.ErrUnsupported) {
			t.Errorf("ScrubGPU on NVMe: %v, want ErrUnsupported", err)
		}
		if l.GPU == "" {
			return
		}
		if _, err := b.Media(ctx, l.GPU); !errors.Is(err, hardware.ErrUnsupported) {
			t.Errorf("Media of a GPU: %v, want ErrUnsupported", err)
		}
	})
	t.Run("NICFirmware", func(t *testing.T) {
		if l.NIC == "" {
			t.Skip("this host has no NIC with devlink firmware (layout NIC empty)")
		}
		fw, err := b.FirmwareVersions(ctx, l.NIC)
		if err != nil || len(fw) == 0 {
			t.Errorf("FirmwareVersions = %v, %v", fw, err)
		}
	})
}

func isDeclared(name string) bool {
	_, ok := hardware.LookupCapability(name)
	return ok && len(name) > 7 && name[:7] == "custom."
}

// rememberedOnVFIO: a vfio-bound NVMe seen once on nvme keeps its serial,
// model and erase capabilities back on vfio-pci, never its SMART values.
func rememberedOnVFIO(t *testing.T, b hardware.Backend, addr hardware.Address) {
	ctx := context.Background()
	prev, err := b.BindDriver(ctx, addr, "nvme")
	if err != nil {
		t.Fatal(err)
	}
	defer b.BindDriver(ctx, addr, prev)
	on, err := b.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if on.Serial+on.Model == "" || on.Driver != "nvme" {
		t.Fatalf("on nvme: driver %s serial %q", on.Driver, on.Serial)
	}
	if _, err := b.BindDriver(ctx, addr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	off, err := b.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if off.Driver != "vfio-pci" || off.Serial != on.Serial || off.Model != on.Model || off.NVMe == nil || !off.NVMe.Remembered {
		t.Fatalf("back on vfio-pci: driver %s serial %q model %q nvme %+v; want %q %q remembered", off.Driver, off.Serial, off.Model, off.NVMe, on.Serial, on.Model)
	}
	if !off.Capabilities["nvme.format"].Equal(on.Capabilities["nvme.format"]) {
		t.Errorf("nvme.format %v on vfio-pci, %v on nvme", off.Capabilities["nvme.format"], on.Capabilities["nvme.format"])
	}
	if _, ok := off.Capabilities["nvme.percent_used"]; ok {
		t.Error("SMART values remembered")
	}
}
