package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/scour-project/scour/plugins"
)

// BenchmarkFirstDestructiveStep times a run of one destructive plugin
// step whose CHECK and Placement check each take checkWait, against
// the sum of the two waits: of-serial-waits is about 1 when they run one
// after the other, about 0.5 when side by side.
func BenchmarkFirstDestructiveStep(b *testing.B) {
	const checkWait = 20 * time.Millisecond
	h := newHarness(b, testConfig(pluginStep("wipe")), func(h *harness) {
		h.alloc = func(ctx context.Context, _ string) (bool, error) {
			sleep(ctx, checkWait)
			return false, nil
		}
	})
	h.pr.check["wipe"] = func(ctx context.Context, _ *plugins.Request) (*plugins.Result, error) {
		sleep(ctx, checkWait)
		return plugins.OK(nil), nil
	}
	for b.Loop() {
		if res := h.clean(b, target(1)); res.Verdict != VerdictClean {
			b.Fatalf("result %v", res)
		}
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(2*checkWait), "of-serial-waits")
}
