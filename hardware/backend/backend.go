// Package backend picks the hardware.Backend named by configuration: the
// real one, or the simulator for tests and demos (`hardware: simulated`).
// It is the only production import of hardware/sim.
package backend

import (
	"fmt"
	"log/slog"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
)

// Open validates cfg and returns the backend it names.
func Open(cfg hardware.Config, log *slog.Logger) (hardware.Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("hardware config: %w", err)
	}
	switch cfg.Backend {
	case hardware.BackendSimulated:
		return sim.New(cfg, log)
	default:
		var opts []hardware.Option
		if log != nil {
			opts = append(opts, hardware.WithLogger(log))
		}
		return hardware.NewReal(cfg, opts...)
	}
}
