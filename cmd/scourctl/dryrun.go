package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline"
)

func init() {
	register("pipeline", subcommand{
		summary: "show which profile and steps would clean a device, without touching it (pipeline dry-run)",
		run:     runPipeline,
	})
}

const pipelineUsage = `usage: scourctl pipeline dry-run [--config FILE] --device ADDR [--resource-class RC]

Reads scourd's config FILE (default /etc/scour/scour.yaml, env SCOUR_CONFIG;
loaded and validated as scourd does) and uses its "hardware:" and
"pipelines:" sections: discovers the device read-only, and prints the
profile that matches (and why the others did not), then each step: run,
skip or fail, and why.
Nothing is written to the device and no plugin is executed.

Options:
`

func runPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "dry-run" {
		fmt.Fprint(stderr, pipelineUsage)
		return 2
	}
	fs := flag.NewFlagSet("pipeline dry-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pipelineUsage); fs.PrintDefaults() }
	var cf configFlag
	cf.register(fs)
	device := fs.String("device", "", "PCI address (required)")
	rc := fs.String("resource-class", "", "the device's Placement resource class, as profiles match it")
	rp := fs.String("rp", "", "resource provider UUID (informational)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	addr, err := hardware.ParseAddress(*device)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl pipeline dry-run: --device: %v\n", err)
		return 2
	}
	doc, err := cf.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl pipeline dry-run: %v\n", err)
		return 1
	}
	be, err := backendFor(doc.Hardware)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl pipeline dry-run: %v\n", err)
		return 1
	}
	e, err := pipeline.New(doc.Pipelines, pipeline.Options{Backend: be, Checkpoints: pipeline.NewMemCheckpoints(),
		Logger: slog.New(slog.DiscardHandler), Allocations: noAllocations{}})
	if err != nil {
		fmt.Fprintf(stderr, "scourctl pipeline dry-run: config %s: %v\n", cf.path, err)
		return 1
	}
	plan, err := e.Plan(ctx, pipeline.Target{Address: addr, ResourceClass: *rc, RPUUID: *rp})
	if err != nil {
		fmt.Fprintf(stderr, "scourctl pipeline dry-run: %v\n", err)
		return 1
	}
	plan.Write(stdout)
	return 0
}

// noAllocations satisfies the engine's constructor; Plan never asks it.
type noAllocations struct{}

func (noAllocations) HasAllocations(context.Context, string) (bool, error) {
	return false, errors.New("dry run: Placement is not consulted")
}

// scourConfig is the part of scour's config file `scourctl plugin` reads.
type scourConfig struct {
	Hardware  hardware.Config `yaml:"hardware"`
	Pipelines pipeline.Config `yaml:"pipelines"`
}

func readScourConfig(path string) (*scourConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c scourConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

// backendFor builds the configured hardware backend (real or simulated).
func backendFor(c hardware.Config) (hardware.Backend, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Backend == hardware.BackendSimulated {
		return sim.New(c, nil)
	}
	return hardware.NewReal(c)
}
