package hardware

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// Backend names for Config.Backend.
const (
	BackendReal      = "real"
	BackendSimulated = "simulated"
)

// Config is the `hardware:` section of scour's configuration. The short
// form `hardware: simulated` (or `hardware: real`) sets Backend only.
//
//	hardware:
//	  backend: real            # or simulated
//	  sysfs_root: /sys
//	  tool_timeout: 30s        # bound on each discovery tool run
//	  gpu_scrub: {min_coverage: 0.97}   # built-in scrubber (libcuda.so.1)
//	  gpu_scrub_tool: /usr/local/bin/gpu-scrub   # optional: an external tool instead
//	  tools: {nvme: nvme, nvidia_smi: nvidia-smi, devlink: devlink}
//	  host_capabilities: {custom.rack: r12}
//	  device_capabilities:
//	    "0000:81:00.0": {nvme.sanitize: [block, crypto], custom.tier: gold}
//	  simulator: {state_dir: /var/lib/scour/sim, devices: [...]}
type Config struct {
	Backend      string        `yaml:"backend"`
	SysfsRoot    string        `yaml:"sysfs_root"`
	ToolTimeout  time.Duration `yaml:"tool_timeout"`
	GPUScrubTool string        `yaml:"gpu_scrub_tool"`
	GPUScrub     GPUScrub      `yaml:"gpu_scrub"`
	Tools        ToolPaths     `yaml:"tools"`
	// HostCapabilities apply to every device on this host; device entries
	// override them, and both override discovered values.
	HostCapabilities   RawValues            `yaml:"host_capabilities"`
	DeviceCapabilities map[string]RawValues `yaml:"device_capabilities"`
	// AllowSubsystemSanitize lists the NVMe devices on which a sanitize
	// may run although their NVM subsystem has, or may have, other
	// controllers (SubsystemSanitizeRefusal): a sanitize erases every
	// namespace of the subsystem, so list a device only when every
	// controller of its subsystem is its own.
	AllowSubsystemSanitize []string  `yaml:"allow_subsystem_sanitize"`
	Simulator              SimConfig `yaml:"simulator"`
}

// ToolPaths names the hardware tools (looked up in PATH unless absolute).
type ToolPaths struct {
	NVMe      string `yaml:"nvme"`
	NvidiaSMI string `yaml:"nvidia_smi"`
	Devlink   string `yaml:"devlink"`
}

// UnmarshalYAML accepts the scalar short form `hardware: simulated`.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*c = Config{Backend: n.Value}
		return nil
	}
	type plain Config
	return n.Decode((*plain)(c))
}

func (c *Config) setDefaults() {
	if c.Backend == "" {
		c.Backend = BackendReal
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = DefaultSysfsRoot
	}
	if c.ToolTimeout == 0 {
		c.ToolTimeout = 30 * time.Second
	}
	if c.Tools.NVMe == "" {
		c.Tools.NVMe = "nvme"
	}
	if c.Tools.NvidiaSMI == "" {
		c.Tools.NvidiaSMI = "nvidia-smi"
	}
	if c.Tools.Devlink == "" {
		c.Tools.Devlink = "devlink"
	}
	c.Simulator.setDefaults()
	c.GPUScrub.setDefaults()
}

// Validate fills defaults and reports every problem: unknown backend,
// bad addresses, malformed declared values, simulator mistakes. Unknown
// capability names are not errors: Declared logs and drops them.
func (c *Config) Validate() error {
	c.setDefaults()
	var errs []error
	switch c.Backend {
	case BackendReal, BackendSimulated:
	default:
		errs = append(errs, fmt.Errorf("hardware.backend %q: want %q or %q", c.Backend, BackendReal, BackendSimulated))
	}
	if c.ToolTimeout < 0 {
		errs = append(errs, fmt.Errorf("hardware.tool_timeout %s: must be positive", c.ToolTimeout))
	}
	if c.GPUScrubTool != "" && !filepath.IsAbs(c.GPUScrubTool) {
		errs = append(errs, fmt.Errorf("hardware.gpu_scrub_tool %q: want an absolute path", c.GPUScrubTool))
	}
	errs = append(errs, c.GPUScrub.validate())
	for _, a := range c.AllowSubsystemSanitize {
		if _, err := ParseAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("hardware.allow_subsystem_sanitize: %w", err))
		}
	}
	_, err := c.declared(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		errs = append(errs, err)
	}
	if c.Backend == BackendSimulated {
		if err := c.Simulator.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Declared holds the operator-declared ("undiscoverable") capabilities.
type Declared struct {
	Host    Capabilities
	Devices map[Address]Capabilities
}

// For returns what is declared for addr: host values, then device values.
func (d Declared) For(addr Address) Capabilities {
	return d.Host.Merge(d.Devices[addr])
}

// Declared parses the declared capabilities, logging a warning for each
// unknown name (which is then ignored). Call after Validate.
func (c *Config) Declared(log *slog.Logger) (Declared, error) {
	return c.declared(log)
}

func (c *Config) declared(log *slog.Logger) (Declared, error) {
	var errs []error
	d := Declared{Devices: map[Address]Capabilities{}}
	d.Host = parseValues("hardware.host_capabilities", c.HostCapabilities, log, &errs)
	keys := make([]string, 0, len(c.DeviceCapabilities))
	for k := range c.DeviceCapabilities {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		addr, err := ParseAddress(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("hardware.device_capabilities: %w", err))
			continue
		}
		where := "hardware.device_capabilities[" + string(addr) + "]"
		d.Devices[addr] = d.Devices[addr].Merge(parseValues(where, c.DeviceCapabilities[k], log, &errs))
	}
	return d, errors.Join(errs...)
}

func parseValues(where string, raw RawValues, log *slog.Logger, errs *[]error) Capabilities {
	out := Capabilities{}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, err := ParseValue(n, raw[n])
		switch {
		case errors.Is(err, ErrUnknownCapability):
			log.Warn("ignoring unknown capability name in config; known names are in docs/hardware.md, operator-defined ones start with "+CustomPrefix,
				"where", where, "capability", n)
		case err != nil:
			*errs = append(*errs, fmt.Errorf("%s: %w", where, err))
		default:
			out[n] = v
		}
	}
	return out
}

// SubsystemSanitizeAllowed says whether addr is listed in
// allow_subsystem_sanitize.
func (c *Config) SubsystemSanitizeAllowed(addr Address) bool {
	for _, a := range c.AllowSubsystemSanitize {
		if p, err := ParseAddress(a); err == nil && p == addr {
			return true
		}
	}
	return false
}

// SetDefaults fills every unset field (config.Section).
func (c *Config) SetDefaults() { c.setDefaults() }
