package builtin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// reportingBackend answers ScrubGPUDetails as the real backend does.
type reportingBackend struct {
	*fakehw.Backend
	details map[string]any
	err     error
}

func (b reportingBackend) ScrubGPUDetails(context.Context, hardware.Address, hardware.Progress) (map[string]any, error) {
	return b.details, b.err
}

func TestGPUScrubRecordsWhatTheScrubberSaid(t *testing.T) {
	dev := &hardware.Device{Address: "0000:41:00.0", Kind: hardware.KindGPU}
	d := map[string]any{"gpu_serial": "S1", "covered_bytes": uint64(1 << 30), "verified": false}
	for _, tc := range []struct {
		name string
		err  error
		code int // 0: ok
	}{
		{"ok", nil, 0},
		{"non-zero read back", fmt.Errorf("scrub: %w", hardware.ErrGPUMemoryNotZero), plugins.CodePermanent},
		{"health gate", fmt.Errorf("scrub: %w", hardware.ErrGPUUnhealthy), plugins.CodePermanent},
		{"no libcuda", fmt.Errorf("scrub: %w", hardware.ErrUnsupported), plugins.CodeUnsupported},
		{"coverage below minimum", fmt.Errorf("scrub: covered too little"), plugins.CodeTryAgainLater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(t, "gpu-scrub", reportingBackend{&fakehw.Backend{}, d, tc.err}, dev, nil)
			var got map[string]any
			if res != nil {
				got = res.Details
			}
			if pe := plugins.AsError(err); pe != nil {
				got = pe.Details
			}
			if plugins.CodeOf(err) != tc.code || got["gpu_serial"] != "S1" {
				t.Errorf("code %d (want %d), details %v", plugins.CodeOf(err), tc.code, got)
			}
		})
	}
}

// optionsBackend answers ScrubGPUWith, noting the options it got.
type optionsBackend struct {
	*fakehw.Backend
	got *hardware.GPUScrubOptions
	err error
}

func (b optionsBackend) ScrubGPUWith(_ context.Context, _ hardware.Address, o hardware.GPUScrubOptions, _ hardware.Progress) (map[string]any, error) {
	*b.got = o
	return map[string]any{"coverage": 0.99}, b.err
}

// The step's min_coverage reaches the scrubber (0: the host's setting);
// a value outside (0, 1] is a configuration error; a scrub refused as a
// possible slice of the GPU (MIG) is permanent, never skipped as
// unsupported.
func TestGPUScrubMinCoverageAndScope(t *testing.T) {
	dev := &hardware.Device{Address: "0000:41:00.0", Kind: hardware.KindGPU}
	var got hardware.GPUScrubOptions
	if _, err := run(t, "gpu-scrub", optionsBackend{&fakehw.Backend{}, &got, nil}, dev, map[string]any{"min_coverage": 0.99}); err != nil || got.MinCoverage != 0.99 {
		t.Errorf("min_coverage 0.99: %v, scrubber got %+v", err, got)
	}
	if _, err := run(t, "gpu-scrub", optionsBackend{&fakehw.Backend{}, &got, nil}, dev, nil); err != nil || got.MinCoverage != 0 {
		t.Errorf("no min_coverage: %v, scrubber got %+v (want 0: the host's)", err, got)
	}
	spec, _ := Lookup("gpu-scrub")
	for _, v := range []any{0, 1.5, -0.1, "0.9", true} {
		if err := spec.CheckArgs(map[string]any{"min_coverage": v}); err == nil || !strings.Contains(err.Error(), "min_coverage") {
			t.Errorf("min_coverage %v: %v, want an error", v, err)
		}
	}
	_, err := run(t, "gpu-scrub", optionsBackend{&fakehw.Backend{}, &got, fmt.Errorf("scrub: MIG mode is enabled: %w", hardware.ErrGPUScope)}, dev, nil)
	if plugins.CodeOf(err) != plugins.CodePermanent {
		t.Errorf("MIG on: code %d, want permanent", plugins.CodeOf(err))
	}
}
