package sim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scour-project/scour/hardware"
)

var kindDefaults = map[hardware.DeviceKind]struct{ vendor, device, class string }{
	hardware.KindNVMe:    {"0x144d", "0xa80a", "0x010802"},
	hardware.KindGPU:     {"0x10de", "0x20b0", "0x030200"},
	hardware.KindNIC:     {"0x15b3", "0x101d", "0x020000"},
	hardware.KindFPGA:    {"0x8086", "0x0b30", "0x120000"}, // Intel PAC N3000
	hardware.KindGeneric: {"0x1af4", "0x1000", "0xff0000"},
}

// writeSysfs lays out the device's sysfs identity the way the kernel
// does (bus/pci/devices/<addr> -> ../../../devices/pci0000:00/<addr>,
// driver and iommu_group symlinks), so discovery reads it with hardware.FS.
func (s *Simulator) writeSysfs(d *simDev, driver string) error {
	root := string(s.fs)
	rel := filepath.Join("devices", "pci0000:00", string(d.addr))
	dir := filepath.Join(root, rel)
	def := kindDefaults[d.cfg.Kind]
	vendor, device := d.cfg.VendorID, d.cfg.DeviceID
	if vendor == "" {
		vendor = def.vendor
	}
	if device == "" {
		device = def.device
	}
	group := 100 + len(s.devs)
	attrs := map[string]string{
		"vendor": vendor, "device": device, "subsystem_vendor": vendor, "subsystem_device": "0x0001",
		"class": def.class, "numa_node": "0", "driver_override": "",
	}
	if !d.cfg.NoReset {
		// As QEMU's NVMe (and most endpoints): FLR is the one method.
		attrs["reset"], attrs["reset_method"] = "", "flr"
	}
	if d.cfg.Kind == hardware.KindNIC {
		attrs["sriov_totalvfs"], attrs["sriov_numvfs"] = "8", "0"
	}
	for _, p := range []string{dir, filepath.Join(root, "bus", "pci", "devices"), filepath.Join(root, "kernel", "iommu_groups", fmt.Sprint(group))} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	for name, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := relink(filepath.Join("..", "..", "..", rel), filepath.Join(root, "bus", "pci", "devices", string(d.addr))); err != nil {
		return err
	}
	if err := relink(fmt.Sprintf("../../../kernel/iommu_groups/%d", group), filepath.Join(dir, "iommu_group")); err != nil {
		return err
	}
	if d.cfg.Kind == hardware.KindFPGA {
		st, err := s.load(d)
		if err != nil {
			return err
		}
		if err := s.writeFPGASysfs(d, st); err != nil {
			return err
		}
	}
	return s.setDriver(d, driver)
}

// setDriver points the driver symlink at driver ("" unbinds) and shows
// the NVMe controller directory only while bound to nvme.
func (s *Simulator) setDriver(d *simDev, driver string) error {
	root := string(s.fs)
	dir := filepath.Join(root, "devices", "pci0000:00", string(d.addr))
	link := filepath.Join(dir, "driver")
	_ = os.Remove(link)
	if driver != "" {
		if err := os.MkdirAll(filepath.Join(root, "bus", "pci", "drivers", driver), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("../../../bus/pci/drivers/"+driver, link); err != nil {
			return err
		}
	}
	nvme := filepath.Join(dir, "nvme")
	if err := os.RemoveAll(nvme); err != nil {
		return err
	}
	if d.cfg.Kind != hardware.KindNVMe || driver != "nvme" {
		return nil
	}
	ctrl := filepath.Join(nvme, d.ctrl)
	if err := os.MkdirAll(ctrl, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]string{"model": d.cfg.Model, "serial": d.cfg.Serial, "firmware_rev": d.cfg.Firmware} {
		if err := os.WriteFile(filepath.Join(ctrl, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func relink(target, link string) error {
	_ = os.Remove(link)
	return os.Symlink(target, link)
}

// TenantPattern starts every block of fresh simulated media, so tests
// and the demo can see tenant data before cleaning and its absence after.
const TenantPattern = "TENANT-DATA"

// writeTenantData fills path with size bytes of recognisable, non-zero
// tenant data.
func writeTenantData(path string, size int64, addr hardware.Address) error {
	block := bytes.Repeat([]byte(fmt.Sprintf("%s %s secret-customer-bytes\n", TenantPattern, addr)), 4096/64)
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for written := int64(0); written < size; {
		n := min(int64(len(block)), size-written)
		if _, err := fh.Write(block[:n]); err != nil {
			fh.Close()
			return err
		}
		written += n
	}
	return fh.Close()
}

// WriteTenantData refills every media file of addr with tenant data, as
// if a new instance had used the device.
func (s *Simulator) WriteTenantData(addr hardware.Address) error {
	d, err := s.dev(addr)
	if err != nil {
		return err
	}
	for _, m := range d.mediaFiles() {
		if err := writeTenantData(m.Path, m.Size, addr); err != nil {
			return err
		}
	}
	return nil
}
