package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/scour-project/scour/hardware"
)

// Discover reads the simulated sysfs identity and the device's state, and
// derives capabilities exactly as the real backend does.
func (s *Simulator) Discover(ctx context.Context, addr hardware.Address) (*hardware.Device, error) {
	d, err := s.dev(addr)
	if err != nil {
		return nil, err
	}
	if _, err := s.enter(ctx, d, "discover"); err != nil {
		return nil, err
	}
	p, err := s.fs.PCIDevice(addr)
	if err != nil {
		return nil, err
	}
	st, err := s.load(d)
	if err != nil {
		return nil, err
	}
	dev := hardware.DeviceFromPCI(p)
	if d.cfg.Kind != hardware.KindNVMe || st.Driver == "nvme" {
		// An NVMe off nvme shows no identity, as on a real host.
		dev.Model, dev.Serial, dev.Firmware = d.cfg.Model, d.cfg.Serial, st.Firmware
	}
	switch d.cfg.Kind {
	case hardware.KindNVMe:
		s.discoverNVMe(d, dev, st)
	case hardware.KindGPU:
		dev.GPU = &hardware.GPUInfo{Name: d.cfg.Model, MemoryMiB: int(d.cfg.MemoryBytes >> 20), DriverVer: "simulated",
			ECCSupported: d.cfg.ECC, ResetSupport: dev.ResetAvailable}
	case hardware.KindNIC:
		fw := map[string]string{}
		for k, v := range st.NICFirmware {
			fw[k] = v
		}
		dev.NIC = &hardware.NICInfo{DevlinkHandle: "pci/" + string(addr), Firmware: fw}
	case hardware.KindFPGA:
		// The simulated sysfs copies the DFL layout: the real parser reads it.
		if dev.FPGA, err = s.fs.FPGA(addr); err != nil {
			return nil, err
		}
	}
	dev.Capabilities = hardware.DeriveCapabilities(dev)
	if d.cfg.Kind == hardware.KindGPU {
		dev.Capabilities["gpu.scrub"] = hardware.Bool(true)
	}
	dev.Capabilities = dev.Capabilities.Merge(s.declared.For(addr))
	return dev, nil
}

func (s *Simulator) discoverNVMe(d *simDev, dev *hardware.Device, st *state) {
	n := &hardware.NVMeInfo{OACS: *d.cfg.OACS, FNA: d.cfg.FNA, SANICAP: d.cfg.SANICAP, CMIC: d.cmic(),
		SubsystemSanitizeAllowed: s.allowShared(d.addr)}
	dev.NVMe = n
	if st.Driver != "nvme" {
		n.BoundToVFIO = st.Driver == "vfio-pci"
		why := fmt.Sprintf("bound to %q, not nvme: no controller or block device; bind to nvme to discover", st.Driver)
		for _, c := range []string{"nvme.format", "nvme.crypto_format", "nvme.sanitize", "nvme.firmware", "nvme.model", "nvme.percent_used", "nvme.critical_warning", "nvme.spare_ok"} {
			dev.Absent[c] = why
		}
		n.OACS, n.FNA, n.SANICAP, n.CMIC = 0, 0, 0, 0 // unknown until bound, as on a real host
		s.memo.Recall(dev)
		return
	}
	defer s.memo.Remember(dev)
	n.Controller = d.ctrl
	sub, others, err := s.fs.NVMeSubsystem(d.ctrl)
	if err != nil {
		s.log.Warn("reading the simulated NVM subsystem", "device", d.addr, "err", err)
	}
	n.Subsystem, n.OtherControllers = sub, others
	for _, m := range d.mediaFiles() {
		n.Namespaces = append(n.Namespaces, m.Path)
	}
	n.Smart = smartOf(d, st)
	if hardware.SanitizeMethods(d.cfg.SANICAP) == nil {
		dev.Absent["nvme.sanitize"] = fmt.Sprintf("controller reports no sanitize support (sanicap %#x)", d.cfg.SANICAP)
	}
}

// smartOf is the simulated SMART log: the configured critical warning,
// and at 100% used the controller flags reliability degraded
// (critical_warning bit 2).
func smartOf(d *simDev, st *state) *hardware.SmartLog {
	sl := &hardware.SmartLog{PercentUsed: st.PercentUsed, AvailSpare: 100, SpareThresh: 10, CriticalWarning: d.cfg.CriticalWarning}
	if d.cfg.AvailSpare != nil {
		sl.AvailSpare = *d.cfg.AvailSpare
	}
	if d.cfg.SpareThresh != nil {
		sl.SpareThresh = *d.cfg.SpareThresh
	}
	if st.PercentUsed >= 100 {
		sl.CriticalWarning |= 4
	}
	return sl
}

// nvme returns d when it is an NVMe device bound to nvme.
func (s *Simulator) nvme(addr hardware.Address) (*simDev, *state, error) {
	d, err := s.dev(addr)
	if err != nil {
		return nil, nil, err
	}
	if d.cfg.Kind != hardware.KindNVMe {
		return nil, nil, fmt.Errorf("%s is a %s device, not NVMe: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
	}
	st, err := s.load(d)
	if err != nil {
		return nil, nil, err
	}
	if st.Driver != "nvme" {
		return nil, nil, fmt.Errorf("%s is bound to %q; bind it to nvme first: %w", addr, st.Driver, hardware.ErrWrongDriver)
	}
	return d, st, nil
}

// SmartLog returns the simulated SMART log.
func (s *Simulator) SmartLog(ctx context.Context, addr hardware.Address) (*hardware.SmartLog, error) {
	d, st, err := s.nvme(addr)
	if err != nil {
		return nil, err
	}
	if _, err := s.enter(ctx, d, "smart-log"); err != nil {
		return nil, err
	}
	return smartOf(d, st), nil
}

// Media returns the namespace files of an nvme-bound device.
func (s *Simulator) Media(ctx context.Context, addr hardware.Address) ([]hardware.Media, error) {
	d, _, err := s.nvme(addr)
	if err != nil {
		return nil, err
	}
	if _, err := s.enter(ctx, d, "media"); err != nil {
		return nil, err
	}
	return d.mediaFiles(), nil
}

func (d *simDev) namespace(ns string) (hardware.Media, bool) {
	name := strings.TrimSuffix(strings.TrimPrefix(ns, "/dev/"), ".img")
	for _, m := range d.mediaFiles() {
		if m.Path == ns || strings.HasSuffix(m.Path, "/"+name+".img") {
			return m, true
		}
	}
	return hardware.Media{}, false
}
