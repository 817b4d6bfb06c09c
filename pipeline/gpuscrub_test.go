package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// A host without libcuda: the built-in GPU scrub answers unsupported
// before touching the GPU, and the step's on_unsupported decides.
func TestGPUScrubWithoutLibcudaFollowsOnUnsupported(t *testing.T) {
	for _, tc := range []struct {
		on   string
		want Verdict
	}{
		{OnUnsupportedFail, VerdictQuarantine},
		{OnUnsupportedSkip, VerdictClean},
	} {
		t.Run(tc.on, func(t *testing.T) {
			h := newHarness(t, testConfig(Step{Name: "scrub", Type: "gpu-scrub", OnUnsupported: tc.on}))
			h.be.ScrubGPUF = func(context.Context, hardware.Address, hardware.Progress) error {
				return fmt.Errorf("scrub GPU: load libcuda.so.1 (is the NVIDIA driver installed?): %w", hardware.ErrUnsupported)
			}
			if res := h.clean(t, target(1)); res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.want)
			}
		})
	}
}
