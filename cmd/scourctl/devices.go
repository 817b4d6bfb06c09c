package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/backend"
)

func init() {
	register("devices", subcommand{
		summary: "discover PCI devices: capabilities, and why some are absent",
		run:     runDevices,
	})
}

func runDevices(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("devices", flag.ContinueOnError)
	fl.SetOutput(stderr)
	sysfs := fl.String("sysfs", "", "sysfs root to read (default /sys, or the config's sysfs_root)")
	cfgPath := fl.String("hardware-config", "", "YAML file holding the hardware section (`hardware: {...}` or its body), e.g. a simulator config")
	asJSON := fl.Bool("json", false, "print JSON instead of text")
	all := fl.Bool("all", false, "also list generic PCI functions (not NVMe, GPU or NIC)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: scourctl devices [-sysfs DIR] [-hardware-config FILE] [-json] [-all] [ADDRESS...]\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadHardwareConfig(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl devices: %v\n", err)
		return 1
	}
	if *sysfs != "" {
		cfg.SysfsRoot = *sysfs
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := backend.Open(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl devices: %v\n", err)
		return 1
	}
	addrs, explicit, err := deviceAddresses(ctx, b, fl.Args())
	if err != nil {
		fmt.Fprintf(stderr, "scourctl devices: %v\n", err)
		return 1
	}
	var reports []hardware.DeviceReport
	code := 0
	for _, a := range addrs {
		dev, err := b.Discover(ctx, a)
		if err != nil {
			fmt.Fprintf(stderr, "scourctl devices: %s: %v\n", a, err)
			code = 1
			continue
		}
		if dev.Kind == hardware.KindGeneric && !*all && !explicit {
			continue
		}
		reports = append(reports, hardware.Describe(dev))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			return 1
		}
		return code
	}
	for _, r := range reports {
		fmt.Fprint(stdout, r.Text())
	}
	return code
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
