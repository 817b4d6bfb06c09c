package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/backend"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var f devicesFlags
		cmd := &cobra.Command{
			Use:   "devices [ADDRESS...]",
			Short: "discover PCI devices: capabilities, and why some are absent",
			Long: `Discovers this host's PCI devices read-only (or the simulator's, with
--hardware-config) and prints, per device, its kind, ids, driver, the
capabilities pipelines match on, and why expected ones are absent.

Default output: one block per device. -o table|json|yaml|value gives one row
per device (columns: ` + strings.Join(deviceColumns, ", ") + `).`,
			RunE: func(cmd *cobra.Command, args []string) error {
				if f.json {
					c.out.format = formatJSON
				}
				reports, err := discoverDevices(cmd.Context(), f, args, c.stderr)
				if c.out.format == "" && len(c.out.columns) == 0 {
					for _, r := range reports {
						fmt.Fprint(c.stdout, r.Text())
					}
				} else if werr := c.out.write(c.stdout, deviceListing(reports)); werr != nil {
					return werr
				}
				return err
			},
		}
		fl := cmd.Flags()
		f.addFlags(fl, "YAML file holding the hardware section (`hardware: {...}` or its body), e.g. a simulator config")
		fl.BoolVar(&f.json, "json", false, "same as -o json")
		_ = fl.MarkDeprecated("json", "use -o json")
		return cmd
	})
}

type devicesFlags struct {
	sysfs, hardwareConfig string
	all, json             bool
}

// addFlags adds the discovery flags: --sysfs, --hardware-config (its help
// given: the commands read it differently) and --all.
func (f *devicesFlags) addFlags(fl *pflag.FlagSet, hardwareConfigHelp string) {
	fl.StringVar(&f.sysfs, "sysfs", "", "sysfs root to read (default /sys, or the config's sysfs_root)")
	fl.StringVar(&f.hardwareConfig, "hardware-config", "", hardwareConfigHelp)
	fl.BoolVar(&f.all, "all", false, "also list generic PCI functions (not NVMe, GPU or NIC)")
}

var deviceColumns = []string{"address", "kind", "vendor", "device", "driver", "model", "serial", "firmware", "namespaces", "capabilities", "absent"}

func deviceListing(reports []hardware.DeviceReport) *listing {
	l := newListing(deviceColumns...)
	for _, r := range reports {
		l.add(string(r.Address), string(r.Kind), r.Vendor, r.Device, r.Driver, r.Model, r.Serial, r.Firmware,
			r.Namespaces, r.Capabilities, r.Absent)
	}
	return l
}

// discoverDevices reports the devices named (all of them without names).
// A device that cannot be discovered is reported on warn and in the
// returned error, after the others.
func discoverDevices(ctx context.Context, f devicesFlags, names []string, warn io.Writer) ([]hardware.DeviceReport, error) {
	cfg, err := loadHardwareConfig(f.hardwareConfig)
	if err != nil {
		return nil, err
	}
	devs, err := discover(ctx, cfg, f, names, warn)
	var reports []hardware.DeviceReport
	for _, d := range devs {
		reports = append(reports, hardware.Describe(d))
	}
	return reports, err
}

// discover discovers the devices named (all of them without names, the
// generic ones only with f.all) with the hardware section cfg.
func discover(ctx context.Context, cfg hardware.Config, f devicesFlags, names []string, warn io.Writer) ([]*hardware.Device, error) {
	if f.sysfs != "" {
		cfg.SysfsRoot = f.sysfs
	}
	log := slog.New(slog.NewTextHandler(warn, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := backend.Open(cfg, log)
	if err != nil {
		return nil, err
	}
	addrs, explicit, err := deviceAddresses(ctx, b, names)
	if err != nil {
		return nil, err
	}
	var devs []*hardware.Device
	var failed []string
	for _, a := range addrs {
		dev, err := b.Discover(ctx, a)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		if dev.Kind == hardware.KindGeneric && !f.all && !explicit {
			continue
		}
		devs = append(devs, dev)
	}
	if len(failed) > 0 {
		return devs, errors.New(strings.Join(failed, "; "))
	}
	return devs, nil
}

func deviceAddresses(ctx context.Context, b hardware.Backend, args []string) ([]hardware.Address, bool, error) {
	if len(args) == 0 {
		addrs, err := b.List(ctx)
		return addrs, false, err
	}
	var out []hardware.Address
	for _, s := range args {
		a, err := hardware.ParseAddress(s)
		if err != nil {
			return nil, true, err
		}
		out = append(out, a)
	}
	return out, true, nil
}

// loadHardwareConfig reads a file with a top-level `hardware:` key, or
// the hardware section's body itself.
func loadHardwareConfig(path string) (hardware.Config, error) {
	if path == "" {
		return hardware.Config{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return hardware.Config{}, err
	}
	var wrapped struct {
		Hardware *hardware.Config `yaml:"hardware"`
	}
	if err := yaml.Unmarshal(b, &wrapped); err != nil {
		return hardware.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if wrapped.Hardware != nil {
		return *wrapped.Hardware, nil
	}
	var cfg hardware.Config
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return hardware.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
