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
	var d map[string]any
	var err error
	if r, ok := be.(gpuScrubReporter); ok {
		d, err = r.ScrubGPUDetails(ctx, t.Device.Address, t.progress)
	} else {
		err = be.ScrubGPU(ctx, t.Device.Address, t.progress)
	}
	if err == nil {
		return plugins.OK(d), nil
	}
	pe := &plugins.Error{Code: plugins.CodeOf(err), Msg: fmt.Sprintf("scrubbing GPU %s memory: %v", t.Device.Address, err), Details: d}
	switch {
	case errors.Is(err, hardware.ErrUnsupported):
		// Said before any memory is touched (no libcuda, not an NVIDIA
		// GPU, GPU not visible to the driver): on_unsupported decides.
		pe.Code = plugins.CodeUnsupported
	case errors.Is(err, hardware.ErrGPUMemoryNotZero), errors.Is(err, hardware.ErrGPUUnhealthy):
		// Memory that reads back non-zero, or a GPU NVML calls unhealthy,
		// is not fixed by retrying the same scrub: quarantine it.
		pe.Code = plugins.CodePermanent
	}
	return nil, pe
}
