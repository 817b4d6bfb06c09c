package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var f dryRunFlags
		dry := &cobra.Command{
			Use:   "dry-run --device ADDR [--resource-class RC]",
			Short: "show which profile and steps would clean a device, without touching it",
			Long:  pipelineHelp,
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				addr, err := hardware.ParseAddress(f.device)
				if err != nil {
					return usagef("--device: %v", err)
				}
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				plan, err := pipelineDryRun(cmd.Context(), cfg, pipeline.Target{Address: addr, ResourceClass: f.resourceClass, RPUUID: f.rp})
				if err != nil {
					return fmt.Errorf("config %s: %w", c.configPath, err)
				}
				plan.Write(c.stdout)
				return nil
			},
		}
		dry.Flags().StringVar(&f.device, "device", "", "PCI address (required)")
		dry.Flags().StringVar(&f.resourceClass, "resource-class", "", "the device's Placement resource class, as profiles match it")
		dry.Flags().StringVar(&f.rp, "rp", "", "resource provider UUID (informational)")
		_ = dry.MarkFlagRequired("device")
		return group("pipeline", "show which profile and steps would clean a device, without touching it (pipeline dry-run)", pipelineHelp, dry)
	})
}

const pipelineHelp = `Reads scourd's config (--config, default /etc/scour/scour.yaml, env
SCOUR_CONFIG; loaded and validated as scourd does) and uses its "hardware:"
and "pipelines:" sections: discovers the device read-only, and prints the
profile that matches (and why the others did not), then each step: run,
skip or fail, and why; then the retirement wipe a run would do if a step
said retire (code 13, a worn drive): the pipeline's retire_wipe or the
default for the device's kind, with its type and args, or that none would
run and the device would be retired unwiped.
Nothing is written to the device and no plugin is executed.`

type dryRunFlags struct{ device, resourceClass, rp string }

// pipelineDryRun plans the cleaning of target with cfg's hardware and
// pipelines, touching nothing.
func pipelineDryRun(ctx context.Context, cfg *config.Config, target pipeline.Target) (*pipeline.Plan, error) {
	be, err := backendFor(cfg.Hardware)
	if err != nil {
		return nil, err
	}
	e, err := pipeline.New(cfg.Pipelines, pipeline.Options{Backend: be, Checkpoints: pipeline.NewMemCheckpoints(),
		Logger: slog.New(slog.DiscardHandler), Allocations: noAllocations{}})
	if err != nil {
		return nil, err
	}
	return e.Plan(ctx, target)
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
