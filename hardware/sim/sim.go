// Package sim is the simulated hardware backend (`hardware: simulated`),
// used by the e2e tests, CI and `make demo`. Nothing in scour's production
// path imports it except the one place that picks a backend from config.
//
// Each simulated device gets, under the state directory:
//
//	<state>/sys/...               a sysfs-like identity (vendor, class, driver
//	                              and iommu_group symlinks) read with hardware.FS
//	<state>/<addr>/nvme0n1.img    one file per NVMe namespace ("media")
//	<state>/<addr>/gpu-memory.img GPU memory
//	<state>/<addr>/fpga-memory.img an FPGA card's memory
//	<state>/<addr>/state.json     wear, firmware, driver: survives restarts
//	<state>/<addr>/<kind>-<op>    fault files: fail-sanitize, hang-format,
//	                              slow-scrub-gpu ... (see hardware.FaultOps)
//
// Media files start filled with recognisable tenant data. Sanitize, Format
// and ScrubGPU really rewrite them (zeros, or random bytes for a crypto
// erase); each cleaning advances the wear counter (percent_used).
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/scour-project/scour/hardware"
)

// Simulator implements hardware.Backend over files.
type Simulator struct {
	cfg      hardware.SimConfig
	declared hardware.Declared
	fs       hardware.FS
	log      *slog.Logger

	memo hardware.NVMeMemo // as the real backend: identity seen on nvme

	// after is the clock of slow faults' progress steps (time.After;
	// tests step it themselves).
	after func(time.Duration) <-chan time.Time

	// allowShared: hardware.allow_subsystem_sanitize.
	allowShared func(hardware.Address) bool

	mu     sync.Mutex
	devs   map[hardware.Address]*simDev
	faults map[hardware.Address]map[string]string
}

var _ hardware.Backend = (*Simulator)(nil)

type simDev struct {
	cfg  hardware.SimDevice
	addr hardware.Address
	ctrl string // "nvme0" for NVMe devices
	dir  string
}

// state is what persists across restarts in <state>/<addr>/state.json.
type state struct {
	Driver      string            `json:"driver"`
	PercentUsed int               `json:"percent_used"`
	Cleanings   int               `json:"cleanings"`
	Firmware    string            `json:"firmware"`
	NICFirmware map[string]string `json:"nic_firmware,omitempty"`
	// Pending is a flashed image's version (NIC: per component) that
	// runs only after activation (devlink reload fw_activate) or, for
	// NVMe, a reset, as on real hardware.
	Pending    string            `json:"pending,omitempty"`
	PendingNIC map[string]string `json:"pending_nic,omitempty"`
	Resets     int               `json:"resets"`
	// FPGA is the bitstream id each region of a simulated FPGA holds.
	FPGA map[string]string `json:"fpga,omitempty"`
}

// New builds the simulator from cfg (validated here), creating the state
// directory, the sysfs identity and tenant-filled media on first start.
func New(cfg hardware.Config, log *slog.Logger) (*Simulator, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Backend = hardware.BackendSimulated
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulated hardware config: %w", err)
	}
	declared, err := cfg.Declared(log)
	if err != nil {
		return nil, err
	}
	s := &Simulator{
		cfg: cfg.Simulator, declared: declared, log: log, after: time.After, allowShared: cfg.SubsystemSanitizeAllowed,
		fs:   hardware.NewFS(filepath.Join(cfg.Simulator.StateDir, "sys")),
		devs: map[hardware.Address]*simDev{}, faults: map[hardware.Address]map[string]string{},
	}
	nvmeIndex := 0
	for _, dc := range cfg.Simulator.Devices {
		addr, _ := hardware.ParseAddress(dc.Address) // validated above
		d := &simDev{cfg: dc, addr: addr, dir: filepath.Join(cfg.Simulator.StateDir, string(addr))}
		if dc.Kind == hardware.KindNVMe {
			d.ctrl = fmt.Sprintf("nvme%d", nvmeIndex)
			nvmeIndex++
		}
		if err := s.setup(d); err != nil {
			return nil, fmt.Errorf("simulated device %s: %w", addr, err)
		}
		s.devs[addr] = d
	}
	if err := s.writeSubsystems(); err != nil {
		return nil, err
	}
	return s, nil
}

// writeSubsystems lays out class/nvme-subsystem/ as the kernel does: one
// nvme-subsys<N> per NVM subsystem, holding an entry per controller, so
// the real parser (FS.NVMeSubsystem) reads it.
func (s *Simulator) writeSubsystems() error {
	base := s.fs.Path("class", "nvme-subsystem")
	if err := os.RemoveAll(base); err != nil {
		return err
	}
	subs := map[string]string{} // configured name -> nvme-subsys<N>
	addrs := make([]hardware.Address, 0, len(s.devs))
	for a := range s.devs {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	for _, a := range addrs {
		d := s.devs[a]
		if d.ctrl == "" {
			continue
		}
		key := d.cfg.Subsystem
		if key == "" {
			key = "\x00" + d.ctrl
		}
		name, ok := subs[key]
		if !ok {
			name = fmt.Sprintf("nvme-subsys%d", len(subs))
			subs[key] = name
		}
		if err := os.MkdirAll(filepath.Join(base, name, d.ctrl), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// subsystemPeers are the devices sharing d's NVM subsystem, d included.
func (s *Simulator) subsystemPeers(d *simDev) []*simDev {
	if d.cfg.Subsystem == "" {
		return []*simDev{d}
	}
	var out []*simDev
	for _, p := range s.devs {
		if p.cfg.Subsystem == d.cfg.Subsystem {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// cmic is the simulated id-ctrl cmic: bit 1 for a shared subsystem.
func (d *simDev) cmic() int {
	if d.cfg.Subsystem != "" {
		return d.cfg.CMIC | 2
	}
	return d.cfg.CMIC
}

func (s *Simulator) setup(d *simDev) error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	st, err := s.load(d)
	if err != nil {
		return err
	}
	if err := s.writeSysfs(d, st.Driver); err != nil {
		return err
	}
	for _, m := range d.mediaFiles() {
		if _, err := os.Stat(m.Path); errors.Is(err, os.ErrNotExist) {
			if err := writeTenantData(m.Path, m.Size, d.addr); err != nil {
				return err
			}
		}
	}
	return nil
}

// mediaFiles lists the device's namespace files or its GPU memory file.
func (d *simDev) mediaFiles() []hardware.Media {
	switch d.cfg.Kind {
	case hardware.KindNVMe:
		out := make([]hardware.Media, d.cfg.Namespaces)
		for i := range out {
			out[i] = hardware.Media{Path: filepath.Join(d.dir, fmt.Sprintf("%sn%d.img", d.ctrl, i+1)), Size: d.cfg.MediaBytes}
		}
		return out
	case hardware.KindGPU:
		return []hardware.Media{{Path: d.gpuMemory(), Size: d.cfg.MemoryBytes}}
	case hardware.KindFPGA:
		return []hardware.Media{{Path: filepath.Join(d.dir, "fpga-memory.img"), Size: d.cfg.MemoryBytes}}
	}
	return nil
}

func (d *simDev) gpuMemory() string { return filepath.Join(d.dir, "gpu-memory.img") }

func (s *Simulator) load(d *simDev) (*state, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked(d)
}

func (s *Simulator) loadLocked(d *simDev) (*state, error) {
	b, err := os.ReadFile(filepath.Join(d.dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		st := &state{Driver: d.cfg.Driver, PercentUsed: d.cfg.PercentUsed, Firmware: d.cfg.Firmware, NICFirmware: map[string]string{}}
		for k, v := range d.cfg.NICFirmware {
			st.NICFirmware[k] = v
		}
		if d.cfg.Kind == hardware.KindFPGA {
			st.FPGA = map[string]string{}
			for _, r := range d.fpgaRegions() {
				st.FPGA[r] = d.cfg.BitstreamID
			}
		}
		return st, s.saveLocked(d, st)
	}
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state of %s: %w", d.addr, err)
	}
	return &st, nil
}

// update applies fn to the device's persisted state under the lock.
func (s *Simulator) update(d *simDev, fn func(*state)) (*state, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.loadLocked(d)
	if err != nil {
		return nil, err
	}
	fn(st)
	return st, s.saveLocked(d, st)
}

func (s *Simulator) saveLocked(d *simDev, st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.dir, "state.json"))
}

func (s *Simulator) dev(addr hardware.Address) (*simDev, error) {
	d, ok := s.devs[addr]
	if !ok {
		return nil, fmt.Errorf("simulated device %s: %w", addr, hardware.ErrNoDevice)
	}
	return d, nil
}

// List returns the simulated addresses.
func (s *Simulator) List(ctx context.Context) ([]hardware.Address, error) {
	out := make([]hardware.Address, 0, len(s.devs))
	for a := range s.devs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// StateDir returns the device's state directory (where fault files go).
func (s *Simulator) StateDir(addr hardware.Address) string {
	return filepath.Join(s.cfg.StateDir, string(addr))
}

// FS returns the simulated sysfs.
func (s *Simulator) FS() hardware.FS { return s.fs }
