package hardware

import (
	"errors"
	"fmt"
	"time"

	"github.com/scour-project/scour/internal/fscheck"
)

// SimConfig describes the simulated hardware (`hardware: simulated`); the
// simulator itself lives in hardware/sim so production code never links it.
type SimConfig struct {
	// StateDir holds per-device media files, state.json (wear, firmware,
	// driver) and fault files; it survives restarts.
	StateDir string      `yaml:"state_dir"`
	Devices  []SimDevice `yaml:"devices"`
	// Step is how long one progress step of a "slow" operation takes.
	Step time.Duration `yaml:"step"`
}

// SimDevice is one simulated PCI function.
type SimDevice struct {
	Address  string     `yaml:"address"`
	Kind     DeviceKind `yaml:"kind"`
	VendorID string     `yaml:"vendor_id"`
	DeviceID string     `yaml:"device_id"`
	Driver   string     `yaml:"driver"` // initial driver; default by kind
	Model    string     `yaml:"model"`
	Serial   string     `yaml:"serial"`
	Firmware string     `yaml:"firmware"`
	NoReset  bool       `yaml:"no_reset"`

	// NVMe
	Namespaces int   `yaml:"namespaces"`  // default 1
	MediaBytes int64 `yaml:"media_bytes"` // per namespace, default 1 MiB
	OACS       *int  `yaml:"oacs"`        // default 0x5f (format supported)
	FNA        int   `yaml:"fna"`         // bit 2: crypto erase by format
	SANICAP    int   `yaml:"sanicap"`     // bits 0/1/2: crypto/block/overwrite
	// Subsystem names an NVM subsystem the device shares with the other
	// devices naming it (an SR-IOV PF and its VFs, a dual-port drive's
	// ports): their cmic gets bit 1, the simulated sysfs lists them in
	// one class/nvme-subsystem entry, and a sanitize through any of them
	// rewrites all their namespaces, as a real drive does. CMIC sets
	// id-ctrl's cmic for a device alone in its subsystem.
	Subsystem    string `yaml:"subsystem"`
	CMIC         int    `yaml:"cmic"`
	PercentUsed  int    `yaml:"percent_used"`   // initial wear
	WearPerClean int    `yaml:"wear_per_clean"` // default 1
	// SMART: critical_warning reported (QEMU's smart_critical_warning),
	// and available spare / its threshold (default 100 / 10; QEMU
	// reports 0 / 0).
	CriticalWarning int  `yaml:"critical_warning"`
	AvailSpare      *int `yaml:"avail_spare"`
	SpareThresh     *int `yaml:"spare_thresh"`

	// GPU
	MemoryBytes int64 `yaml:"memory_bytes"` // default 1 MiB
	ECC         bool  `yaml:"ecc"`

	// NIC: devlink component -> running version
	NICFirmware map[string]string `yaml:"nic_firmware"`

	// FPGA: fpga_region count (default 1) and the id the card holds at
	// first start (the tenant's bitstream; default "0xtenant"). The
	// card's memory is memory_bytes.
	FPGARegions int    `yaml:"fpga_regions"`
	BitstreamID string `yaml:"bitstream_id"`

	// Faults: operation -> "fail", "hang" or "slow" (see FaultOps).
	Faults map[string]string `yaml:"faults"`
}

// Simulator operations that accept faults, and the fault kinds. A file
// <state_dir>/<address>/<kind>-<op> (e.g. fail-sanitize) injects the
// fault into a running process; removing it clears the fault.
var (
	FaultOps   = []string{"discover", "smart-log", "sanitize", "format", "media", "scrub-gpu", "flash-firmware", "activate-firmware", "firmware-versions", "reset", "bind", "program-fpga", "fpga-readback", "clear-fpga-memory"}
	FaultKinds = []string{"fail", "hang", "slow"}
)

func (c *SimConfig) setDefaults() {
	if c.Step == 0 {
		c.Step = 20 * time.Millisecond
	}
	for i := range c.Devices {
		d := &c.Devices[i]
		if d.Kind == "" {
			d.Kind = KindNVMe
		}
		if d.Driver == "" {
			d.Driver = map[DeviceKind]string{KindNVMe: "nvme", KindGPU: "nvidia", KindNIC: "mlx5_core", KindFPGA: "dfl-pci"}[d.Kind]
		}
		if d.Kind == KindNVMe && d.Namespaces == 0 {
			d.Namespaces = 1
		}
		if d.Kind == KindFPGA && d.FPGARegions == 0 {
			d.FPGARegions = 1
		}
		if d.Kind == KindFPGA && d.BitstreamID == "" {
			d.BitstreamID = "0xtenant"
		}
		if d.MediaBytes == 0 {
			d.MediaBytes = 1 << 20
		}
		if d.MemoryBytes == 0 {
			d.MemoryBytes = 1 << 20
		}
		if d.OACS == nil {
			v := 0x5f
			d.OACS = &v
		}
		if d.WearPerClean == 0 {
			d.WearPerClean = 1
		}
	}
}

func (c *SimConfig) validate() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("hardware.simulator.state_dir: required with backend simulated"))
	}
	seen := map[Address]bool{}
	for i, d := range c.Devices {
		where := fmt.Sprintf("hardware.simulator.devices[%d]", i)
		addr, err := ParseAddress(d.Address)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		} else if seen[addr] {
			errs = append(errs, fmt.Errorf("%s: address %s listed twice", where, addr))
		}
		seen[addr] = true
		switch d.Kind {
		case KindNVMe, KindGPU, KindNIC, KindFPGA, KindGeneric:
		default:
			errs = append(errs, fmt.Errorf("%s: kind %q: want nvme, gpu, nic, fpga or generic", where, d.Kind))
		}
		if d.MediaBytes < 0 || d.MemoryBytes < 0 || d.Namespaces < 0 || d.PercentUsed < 0 || d.FPGARegions < 0 {
			errs = append(errs, fmt.Errorf("%s: sizes, namespaces, fpga_regions and percent_used must not be negative", where))
		}
		for op, kind := range d.Faults {
			if indexOf(FaultOps, op) < 0 || indexOf(FaultKinds, kind) < 0 {
				errs = append(errs, fmt.Errorf("%s: fault %s: %s: want an operation of %v and a kind of %v", where, op, kind, FaultOps, FaultKinds))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckPaths reports, creating nothing, whether the simulated backend
// could create its state directory (backend simulated only).
func (c *Config) CheckPaths() error {
	if c.Backend != BackendSimulated || c.Simulator.StateDir == "" {
		return nil
	}
	if err := fscheck.WritableDir(c.Simulator.StateDir); err != nil {
		return fmt.Errorf("hardware.simulator.state_dir: %w", err)
	}
	return nil
}
