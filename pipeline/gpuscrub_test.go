package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// A host without libcuda: the built-in GPU scrub answers unsupported
// before touching the GPU, and the step's on_unsupported decides whether
// it failed or was skipped. Either way nothing erased the GPU's memory,
// so the run is never clean (unerased).
func TestGPUScrubWithoutLibcudaFollowsOnUnsupported(t *testing.T) {
	for _, tc := range []struct {
		on    string
		want  Verdict
		state StepState
	}{
		{OnUnsupportedFail, VerdictQuarantine, StepFailed},
		{OnUnsupportedSkip, VerdictQuarantine, StepSkipped},
	} {
		t.Run(tc.on, func(t *testing.T) {
			h := newHarness(t, testConfig(Step{Name: "scrub", Type: "gpu-scrub", OnUnsupported: tc.on}))
			h.be.ScrubGPUF = func(context.Context, hardware.Address, hardware.Progress) error {
				return fmt.Errorf("scrub GPU: load libcuda.so.1 (is the NVIDIA driver installed?): %w", hardware.ErrUnsupported)
			}
			res := h.clean(t, target(1))
			if res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.want)
			}
			if len(res.Steps) != 1 || res.Steps[0].State != tc.state {
				t.Fatalf("steps %+v, want scrub %s", res.Steps, tc.state)
			}
		})
	}
}
