package builtin

import (
	"context"
	"fmt"
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
