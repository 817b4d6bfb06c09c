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

// gpuScrubberWith is a backend that takes a step's own scrub settings
// (args.min_coverage) besides reporting what it did.
type gpuScrubberWith interface {
	ScrubGPUWith(ctx context.Context, addr hardware.Address, o hardware.GPUScrubOptions, p hardware.Progress) (map[string]any, error)
}

// gpuMinCoverage reads args.min_coverage: the share of the memory CUDA
// reports the built-in scrubber must cover (0: the host's setting).
func gpuMinCoverage(a map[string]any) (float64, error) {
	v, ok := a["min_coverage"]
	if !ok || v == nil {
		return 0, nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	default:
		return 0, fmt.Errorf("min_coverage: %v (%T) is not a number", v, v)
	}
	if f <= 0 || f > 1 {
		return 0, fmt.Errorf("min_coverage: %v, want a share of the GPU's memory in (0, 1], e.g. 0.99", f)
	}
	return f, nil
}

func checkGPUScrubArgs(a map[string]any) error {
	_, err := gpuMinCoverage(a)
	return errors.Join(onlyArgs(a, "min_coverage"), err)
}

func gpuScrub(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	minCov, err := gpuMinCoverage(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: %v", t.Step, err)
	}
	var d map[string]any
	if w, ok := be.(gpuScrubberWith); ok {
		d, err = w.ScrubGPUWith(ctx, t.Device.Address, hardware.GPUScrubOptions{MinCoverage: minCov}, t.progress)
	} else if r, ok := be.(gpuScrubReporter); ok {
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
	case errors.Is(err, hardware.ErrGPUMemoryNotZero), errors.Is(err, hardware.ErrGPUUnhealthy), errors.Is(err, hardware.ErrGPUScope):
		// Memory that reads back non-zero, a GPU NVML calls unhealthy, or
		// memory that may be a slice of the GPU (MIG on: a tenant can
		// turn it on) is not fixed by retrying the same scrub: quarantine
		// it until an operator looks.
		pe.Code = plugins.CodePermanent
	}
	return nil, pe
}
