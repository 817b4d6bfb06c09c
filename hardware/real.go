package hardware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Real is the Backend for real hardware: a rooted sysfs plus nvme-cli,
// nvidia-smi and devlink run through a Runner.
type Real struct {
	fs       FS
	run      Runner
	log      *slog.Logger
	cfg      Config
	declared Declared
	logged   sync.Map  // absent-capability log lines already written
	memo     NVMeMemo  // identity of NVMe devices last seen on nvme
	nvmeList sharedRun // nvmeController's `nvme list`, shared by concurrent callers
	// nvmeReady bounds the wait after a bind to nvme (waitNVMeReady).
	nvmeReady time.Duration
	versions  sync.Map // binaryKey of a tool -> its version line (ToolVersions)
	// fwBase and release name the kernel's firmware directory and
	// release for FirmwareFile ("": /lib/firmware, /proc's osrelease).
	fwBase, release string
}

var _ Backend = (*Real)(nil)

// Option configures NewReal.
type Option func(*Real)

// WithRunner replaces the ExecRunner (tests pass a FakeRunner).
func WithRunner(r Runner) Option { return func(b *Real) { b.run = r } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(b *Real) { b.log = l } }

// NewReal validates cfg and returns the real backend. Unknown declared
// capability names are logged and ignored.
func NewReal(cfg Config, opts ...Option) (*Real, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("hardware config: %w", err)
	}
	r := &Real{fs: NewFS(cfg.SysfsRoot), run: ExecRunner{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: cfg}
	for _, o := range opts {
		o(r)
	}
	d, err := cfg.Declared(r.log)
	if err != nil {
		return nil, fmt.Errorf("hardware config: %w", err)
	}
	r.declared = d
	return r, nil
}

// FS returns the sysfs the backend reads.
func (r *Real) FS() FS { return r.fs }

// List returns the PCI functions in sysfs.
func (r *Real) List(ctx context.Context) ([]Address, error) { return r.fs.PCIAddresses() }

// Discover reads sysfs for addr, asks the tools for what they know, and
// merges the operator-declared capabilities. Missing or failing tools
// leave the capability absent, with the reason in Device.Absent; only a
// missing device or a cancelled ctx is an error.
func (r *Real) Discover(ctx context.Context, addr Address) (*Device, error) {
	p, err := r.fs.PCIDevice(addr)
	if err != nil {
		return nil, err
	}
	dev := DeviceFromPCI(p)
	switch dev.Kind {
	case KindNVMe:
		r.discoverNVMe(ctx, dev, p)
	case KindGPU:
		r.discoverGPU(ctx, dev)
	case KindNIC:
		r.discoverNIC(ctx, dev)
	case KindFPGA:
		r.discoverFPGA(dev)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discover %s: %w", addr, err)
	}
	dev.Capabilities = DeriveCapabilities(dev)
	if dev.Kind == KindGPU {
		// Known either way: false means neither a hardware.gpu_scrub_tool
		// nor, for an NVIDIA GPU, a loadable libcuda for the built-in one.
		dev.Capabilities["gpu.scrub"] = Bool(r.cfg.GPUScrubTool != "" ||
			dev.VendorID == "0x10de" && r.gpuScrubAvailable(ctx))
	}
	dev.Capabilities = dev.Capabilities.Merge(r.declared.For(addr))
	for name, why := range dev.Absent {
		// Once per device, capability and reason: discovery repeats on
		// every reconcile and would otherwise flood the log.
		if _, seen := r.logged.LoadOrStore(string(addr)+"\x00"+name+"\x00"+why, true); !seen {
			r.log.Info("capability absent", "device", addr, "capability", name, "reason", why)
		}
	}
	return dev, nil
}

// DeviceFromPCI starts a Device from its sysfs facts (kind from the class).
func DeviceFromPCI(p *PCIDevice) *Device {
	return &Device{
		Address: p.Address, Kind: KindFromClass(p.Class),
		VendorID: p.Vendor, DeviceID: p.Device, SubsystemVendor: p.SubsystemVendor, SubsystemDevice: p.SubsystemDevice,
		Class: p.Class, Driver: p.Driver, IOMMUGroup: p.IOMMUGroup, NUMANode: p.NUMANode,
		ResetAvailable: p.Reset, SRIOVTotalVFs: p.SRIOVTotalVFs, SRIOVNumVFs: p.SRIOVNumVFs,
		Absent: map[string]string{},
	}
}

// tool runs a discovery tool under the configured per-tool timeout.
func (r *Real) tool(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	return r.run.Run(ctx, name, args...)
}

// absentReason words a tool error for Device.Absent.
func absentReason(tool string, err error) string {
	switch {
	case errors.Is(err, ErrToolMissing):
		return tool + " not installed"
	case errors.Is(err, context.DeadlineExceeded):
		return tool + " timed out: " + err.Error()
	}
	return tool + " failed: " + err.Error()
}

func markAbsent(dev *Device, why string, names ...string) {
	for _, n := range names {
		if _, ok := dev.Absent[n]; !ok {
			dev.Absent[n] = why
		}
	}
}

var nvmeToolCaps = []string{"nvme.format", "nvme.crypto_format", "nvme.sanitize", "nvme.firmware", "nvme.model"}
var nvmeSmartCaps = []string{"nvme.percent_used", "nvme.critical_warning", "nvme.spare_ok"}

func (r *Real) discoverNVMe(ctx context.Context, dev *Device, p *PCIDevice) {
	n := &NVMeInfo{SubsystemSanitizeAllowed: r.cfg.SubsystemSanitizeAllowed(dev.Address)}
	dev.NVMe = n
	if dev.Driver != "nvme" {
		n.BoundToVFIO = dev.Driver == "vfio-pci"
		why := fmt.Sprintf("bound to %q, not nvme: no controller or block device; bind to nvme to discover", dev.Driver)
		markAbsent(dev, why, append(nvmeToolCaps, nvmeSmartCaps...)...)
		if !r.memo.recall(dev) {
			// The PCI function's own VPD, readable on any driver, names
			// drives that have one.
			if v, err := r.fs.VPD(dev.Address); err == nil {
				dev.Serial, dev.Model = v.Serial, v.Product
				if v.Serial != "" {
					dev.SerialSource = SerialFromVPD
				}
			}
		}
		return
	}
	defer r.memo.remember(dev)
	r.nvmeController(ctx, dev, p)
	if n.Controller == "" {
		markAbsent(dev, "no NVMe controller found for this device", append(nvmeToolCaps, nvmeSmartCaps...)...)
		return
	}
	r.subsystemOf(dev)
	ctrl := "/dev/" + n.Controller
	// Without id-ctrl, model and firmware may still be known (nvme list
	// or sysfs); the capability bits are not.
	idCaps := nvmeToolCaps[:3]
	if dev.Model == "" {
		idCaps = nvmeToolCaps
	}
	if out, err := r.tool(ctx, r.cfg.Tools.NVMe, "id-ctrl", ctrl, "-o", "json"); err != nil {
		markAbsent(dev, absentReason("nvme id-ctrl", err), idCaps...)
	} else if id, err := ParseIDCtrl(out); err != nil {
		markAbsent(dev, err.Error(), idCaps...)
	} else {
		n.OACS, n.FNA, n.SANICAP, n.CMIC = id.OACS, id.FNA, id.SANICAP, id.CMIC
		dev.Model, dev.Serial, dev.Firmware = id.MN, id.SN, id.FR
		if SanitizeMethods(id.SANICAP) == nil {
			dev.Absent["nvme.sanitize"] = fmt.Sprintf("controller reports no sanitize support (sanicap %#x)", id.SANICAP)
		}
	}
	if s, err := r.smartLog(ctx, n.Controller); err != nil {
		markAbsent(dev, err.Error(), nvmeSmartCaps...)
	} else {
		n.Smart = s
	}
}

// subsystemOf fills dev's NVM subsystem and its other controllers from
// sysfs, and whether the operator allows a sanitize on it anyway.
func (r *Real) subsystemOf(dev *Device) {
	n := dev.NVMe
	n.SubsystemSanitizeAllowed = r.cfg.SubsystemSanitizeAllowed(dev.Address)
	sub, others, err := r.fs.NVMeSubsystem(n.Controller)
	if err != nil {
		r.log.Warn("reading the NVM subsystem's controllers from sysfs", "device", dev.Address, "controller", n.Controller, "err", err)
		return
	}
	n.Subsystem, n.OtherControllers = sub, others
}

// nvmeController finds the controller and namespaces of an nvme-bound
// device: `nvme list -v -o json` first, sysfs when nvme-cli is missing or
// fails (model/serial/firmware then come from sysfs too). Concurrent
// callers share one `nvme list` that began after each of them asked
// (sharedRun): each run opens every controller of the host.
func (r *Real) nvmeController(ctx context.Context, dev *Device, p *PCIDevice) {
	n := dev.NVMe
	out, err := r.nvmeList.next(ctx, func(ctx context.Context) ([]byte, error) {
		return r.tool(ctx, r.cfg.Tools.NVMe, "list", "-v", "-o", "json")
	})
	if err == nil {
		var ctrls []NVMeListController
		if ctrls, err = ParseNVMeList(out); err == nil {
			for _, c := range ctrls {
				if c.Address == dev.Address {
					n.Controller = c.Controller
					dev.Model, dev.Serial, dev.Firmware = c.Model, c.Serial, c.Firmware
					for _, ns := range c.Namespaces {
						n.Namespaces = append(n.Namespaces, "/dev/"+ns)
					}
					if len(n.Namespaces) == 0 {
						// An nvme-cli that lists a multipath drive's heads
						// only per subsystem (no Paths per controller) names
						// none for it: sysfs knows this controller's own.
						r.sysfsNamespaces(dev)
					}
					return
				}
			}
			err = errors.New("nvme list does not show this device")
		}
	}
	if _, seen := r.logged.LoadOrStore("nvme list\x00"+err.Error(), true); !seen {
		r.log.Warn("nvme list failed, using sysfs for controller and namespaces", "device", dev.Address, "err", err)
	}
	if len(p.NVMeControllers) == 0 {
		return
	}
	n.Controller = p.NVMeControllers[0]
	dev.Model, dev.Serial, dev.Firmware = r.fs.NVMeIdentity(dev.Address, n.Controller)
	r.sysfsNamespaces(dev)
}

// sysfsNamespaces fills dev's namespaces from its controller's own sysfs
// folder (multipath path nodes mapped to their heads).
func (r *Real) sysfsNamespaces(dev *Device) {
	nss, err := r.fs.NVMeNamespaces(dev.Address, dev.NVMe.Controller)
	if err != nil {
		r.log.Warn("reading namespaces from sysfs", "device", dev.Address, "err", err)
	}
	for _, ns := range nss {
		dev.NVMe.Namespaces = append(dev.NVMe.Namespaces, "/dev/"+ns.Name)
	}
}

func (r *Real) smartLog(ctx context.Context, ctrl string) (*SmartLog, error) {
	out, err := r.tool(ctx, r.cfg.Tools.NVMe, "smart-log", "/dev/"+ctrl, "-o", "json")
	if err != nil {
		return nil, errors.New(absentReason("nvme smart-log", err))
	}
	return ParseSmartLog(out)
}

var gpuToolCaps = []string{"gpu.model", "gpu.memory_mib", "gpu.driver_version"}

func (r *Real) discoverGPU(ctx context.Context, dev *Device) {
	g := &GPUInfo{ResetSupport: dev.ResetAvailable}
	dev.GPU = g
	if dev.VendorID != "0x10de" || dev.Driver != "nvidia" {
		why := fmt.Sprintf("generic GPU (vendor %s, driver %q): only NVIDIA with the nvidia driver is queried", dev.VendorID, dev.Driver)
		markAbsent(dev, why, append(gpuToolCaps, "gpu.ecc")...)
		return
	}
	out, err := r.tool(ctx, r.cfg.Tools.NvidiaSMI, "--query-gpu="+NvidiaSMIQuery, "--format=csv,noheader,nounits")
	if err != nil {
		markAbsent(dev, absentReason("nvidia-smi", err), append(gpuToolCaps, "gpu.ecc")...)
		return
	}
	gpus, err := ParseNvidiaSMI(out)
	if err != nil {
		markAbsent(dev, err.Error(), append(gpuToolCaps, "gpu.ecc")...)
		return
	}
	for _, x := range gpus {
		if x.Address == dev.Address {
			g.Name, g.MemoryMiB, g.DriverVer = x.Name, x.MemoryMiB, x.Driver
			g.ECCSupported = x.ECC == "Enabled"
			dev.Model, dev.Serial, dev.Firmware = x.Name, x.Serial, x.VBIOS
			if x.ECC != "Enabled" && x.ECC != "Disabled" {
				dev.Absent["gpu.ecc"] = "nvidia-smi reports ECC " + x.ECC
			}
			return
		}
	}
	markAbsent(dev, "nvidia-smi does not list this GPU", append(gpuToolCaps, "gpu.ecc")...)
}

func (r *Real) discoverNIC(ctx context.Context, dev *Device) {
	dev.NIC = &NICInfo{DevlinkHandle: "pci/" + string(dev.Address)}
	fw, err := r.firmware(ctx, dev.Address, r.tool)
	if err != nil {
		dev.Absent[NICFirmwarePrefix+"*"] = err.Error()
		return
	}
	dev.NIC.Firmware = fw
	if v, ok := fw["fw.version"]; ok {
		dev.Firmware = v
	} else if v, ok := fw["fw"]; ok {
		dev.Firmware = v
	}
}

type runFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func (r *Real) firmware(ctx context.Context, addr Address, run runFunc) (map[string]string, error) {
	handle := "pci/" + string(addr)
	out, err := run(ctx, r.cfg.Tools.Devlink, "dev", "info", handle, "-j")
	if err != nil {
		return nil, errors.New(absentReason("devlink dev info", err))
	}
	infos, err := ParseDevlinkInfo(out)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if strings.EqualFold(in.Handle, handle) {
			return in.Running, nil
		}
	}
	return nil, fmt.Errorf("devlink dev info has no %s", handle)
}
