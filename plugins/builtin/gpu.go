package builtin

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// gpuScrubReporter is a backend whose GPU scrub says what it did (model,
// serial, bytes covered, verification) for the cleaning record.
type gpuScrubReporter interface {
	ScrubGPUDetails(ctx context.Context, addr hardware.Address, p hardware.Progress) (map[string]any, error)
}

func gpuScrub(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	r, ok := be.(gpuScrubReporter)
	if !ok {
		if err := be.ScrubGPU(ctx, t.Device.Address, t.progress); err != nil {
			return nil, fmt.Errorf("scrubbing GPU %s memory: %w", t.Device.Address, err)
		}
		return plugins.OK(nil), nil
	}
	d, err := r.ScrubGPUDetails(ctx, t.Device.Address, t.progress)
	if err == nil {
		return plugins.OK(d), nil
	}
	pe := plugins.AsError(fmt.Errorf("scrubbing GPU %s memory: %w", t.Device.Address, err))
	// Memory that reads back non-zero, or a GPU NVML calls unhealthy, is
	// not fixed by retrying the same scrub: quarantine it for an operator.
	if errors.Is(err, hardware.ErrGPUMemoryNotZero) || errors.Is(err, hardware.ErrGPUUnhealthy) {
		pe.Code = plugins.CodePermanent
	}
	pe.Details = d
	return nil, pe
}
