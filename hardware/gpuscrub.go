package hardware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// GPUScrub configures the built-in NVIDIA scrubber: scour-gpu-scrub
// (cmd/scour-gpu-scrub over hardware/gpu), used by gpu-scrub steps
// unless gpu_scrub_tool names an external tool. It is a separate program
// so scourd stays static and a hung driver call can be killed.
type GPUScrub struct {
	// Helper is the scour-gpu-scrub program (PATH lookup unless absolute).
	Helper string `yaml:"helper"`
	// MinCoverage is the share of the GPU's memory (as CUDA reports it)
	// a scrub must write, zero and read back; below it the step fails and
	// the device stays reserved. A gpu-scrub step's args.min_coverage
	// overrides it. Default DefaultGPUMinCoverage.
	MinCoverage float64 `yaml:"min_coverage"`
	CUDALibrary string  `yaml:"cuda_library"` // default libcuda.so.1
	NVMLLibrary string  `yaml:"nvml_library"` // default libnvidia-ml.so.1
}

// DefaultGPUMinCoverage is hardware.gpu_scrub.min_coverage's default,
// the built-in scrubber's own (gpu.DefaultMinCoverage: a test keeps them
// equal; this package does not load the GPU libraries).
const DefaultGPUMinCoverage = 0.97

// GPUScrubOptions are a gpu-scrub step's own settings.
type GPUScrubOptions struct {
	// MinCoverage, when above 0, replaces hardware.gpu_scrub.min_coverage
	// for this scrub (the built-in scrubber; an external tool answers for
	// its own coverage).
	MinCoverage float64
}

func (g *GPUScrub) setDefaults() {
	if g.Helper == "" {
		g.Helper = "scour-gpu-scrub"
	}
	if g.MinCoverage == 0 {
		g.MinCoverage = DefaultGPUMinCoverage
	}
	if g.CUDALibrary == "" {
		g.CUDALibrary = "libcuda.so.1"
	}
	if g.NVMLLibrary == "" {
		g.NVMLLibrary = "libnvidia-ml.so.1"
	}
}

func (g *GPUScrub) validate() error {
	if g.MinCoverage <= 0 || g.MinCoverage > 1 {
		return fmt.Errorf("hardware.gpu_scrub.min_coverage %v: want a share of the GPU's memory in (0, 1], e.g. %v", g.MinCoverage, DefaultGPUMinCoverage)
	}
	return nil
}

func (g *GPUScrub) args(minCoverage float64, extra ...string) []string {
	if minCoverage <= 0 {
		minCoverage = g.MinCoverage
	}
	return append([]string{"-cuda-library", g.CUDALibrary, "-nvml-library", g.NVMLLibrary,
		"-min-coverage", strconv.FormatFloat(minCoverage, 'g', -1, 64)}, extra...)
}

// Exit codes of scour-gpu-scrub (cmd/scour-gpu-scrub).
const (
	gpuScrubUnsupported = 2
	gpuScrubPermanent   = 3
)

// ScrubGPU zeroes and verifies addr's memory: see ScrubGPUDetails.
func (r *Real) ScrubGPU(ctx context.Context, addr Address, p Progress) error {
	_, err := r.ScrubGPUDetails(ctx, addr, p)
	return err
}

// ScrubGPUDetails is ScrubGPUWith with the host's settings.
func (r *Real) ScrubGPUDetails(ctx context.Context, addr Address, p Progress) (map[string]any, error) {
	return r.ScrubGPUWith(ctx, addr, GPUScrubOptions{}, p)
}

// ScrubGPUWith runs hardware.gpu_scrub_tool (`<tool> <addr>`, which must
// zero and verify the device's memory and exit 0 only on success) when one
// is configured, else the built-in scrubber on an NVIDIA GPU bound to the
// nvidia driver, which zeroes and reads back all the memory it can
// allocate and fails when that is less than the minimum coverage (o, else
// hardware.gpu_scrub.min_coverage) of what CUDA reports, or when that
// memory may be a slice of the GPU (MIG: ErrGPUScope). It returns what
// the cleaning record should say, also when the scrub failed. Without
// libcuda it returns ErrUnsupported.
func (r *Real) ScrubGPUWith(ctx context.Context, addr Address, o GPUScrubOptions, p Progress) (map[string]any, error) {
	p0, err := r.fs.PCIDevice(addr)
	if err != nil {
		return nil, err
	}
	if k := KindFromClass(p0.Class); k != KindGPU {
		return nil, fmt.Errorf("scrub GPU %s: a %s device: %w", addr, k, ErrUnsupported)
	}
	if p == nil {
		p = func(float64) {}
	}
	if tool := r.cfg.GPUScrubTool; tool != "" {
		d := map[string]any{"method": "external", "tool": tool}
		p(0)
		if _, err := r.run.Run(ctx, tool, string(addr)); err != nil {
			return d, fmt.Errorf("scrub GPU %s with %s: %w", addr, tool, err)
		}
		p(1)
		return d, nil
	}
	if p0.Vendor != "0x10de" {
		return nil, fmt.Errorf("scrub GPU %s: vendor %s; the built-in scrubber handles NVIDIA GPUs only (configure hardware.gpu_scrub_tool): %w", addr, p0.Vendor, ErrUnsupported)
	}
	if p0.Driver != "nvidia" {
		return nil, fmt.Errorf("scrub GPU %s: bound to %q, the built-in scrubber needs the nvidia driver (give the step `driver: nvidia`): %w", addr, p0.Driver, ErrWrongDriver)
	}
	p(0)
	d, err := r.runGPUScrub(ctx, addr, o.MinCoverage)
	if err == nil {
		p(1)
	}
	return d, err
}

// gpuScrubOutput is scour-gpu-scrub's stdout.
type gpuScrubOutput struct {
	Details map[string]any `json:"details"`
	Error   string         `json:"error"`
	Class   string         `json:"class"`
}

func (r *Real) runGPUScrub(ctx context.Context, addr Address, minCoverage float64) (map[string]any, error) {
	g := r.cfg.GPUScrub
	out, err := r.run.Run(ctx, g.Helper, g.args(minCoverage, string(addr))...)
	var res gpuScrubOutput
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber() // byte counts stay exact integers in the record
	if derr := dec.Decode(&res); derr != nil && err == nil {
		return nil, fmt.Errorf("scrub GPU %s: %s printed no result (%v): the device stays reserved", addr, g.Helper, derr)
	}
	var te *ToolError
	switch {
	case err == nil:
		return res.Details, nil
	case errors.Is(err, ErrToolMissing):
		return nil, fmt.Errorf("scrub GPU %s: %v (install scour-gpu-scrub with scourd, or set hardware.gpu_scrub.helper): %w", addr, err, ErrUnsupported)
	case errors.As(err, &te) && te.ExitCode == gpuScrubUnsupported:
		return res.Details, fmt.Errorf("scrub GPU %s: %s: %w", addr, res.Error, ErrUnsupported)
	case errors.As(err, &te) && te.ExitCode == gpuScrubPermanent && res.Class == "not_zero":
		return res.Details, fmt.Errorf("scrub GPU %s: %s: %w", addr, res.Error, ErrGPUMemoryNotZero)
	case errors.As(err, &te) && te.ExitCode == gpuScrubPermanent && res.Class == "scope":
		return res.Details, fmt.Errorf("scrub GPU %s: %s: %w", addr, res.Error, ErrGPUScope)
	case errors.As(err, &te) && te.ExitCode == gpuScrubPermanent:
		return res.Details, fmt.Errorf("scrub GPU %s: %s: %w", addr, res.Error, ErrGPUUnhealthy)
	case res.Error != "":
		return res.Details, fmt.Errorf("scrub GPU %s: %s", addr, res.Error)
	}
	return res.Details, fmt.Errorf("scrub GPU %s: %w", addr, err)
}

// gpuScrubAvailable runs `scour-gpu-scrub -check`: the built-in scrub can
// run on this host (helper installed, libcuda loads).
func (r *Real) gpuScrubAvailable(ctx context.Context) bool {
	g := r.cfg.GPUScrub
	_, err := r.tool(ctx, g.Helper, "-check", "-cuda-library", g.CUDALibrary)
	return err == nil
}
