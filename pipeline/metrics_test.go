package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/plugins"
)

// Progress reaches the gauge and the checkpoint store while the step runs;
// counters and the in-flight gauge match a golden exposition afterwards.
func TestProgressAndMetrics(t *testing.T) {
	h := newHarness(t, testConfig(pluginStep("a"),
		pluginStep("c", func(s *Step) { s.Requires = Requires{"pci.iommu": true}; s.OnUnsupported = OnUnsupportedSkip }),
		pluginStep("b")))
	h.e.progressEvery = 0 // every report is checkpointed
	h.pr.progress = map[string][]float64{"a": {0.25}}
	h.pr.clean["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		if g := testutil.ToFloat64(h.e.m.progress.WithLabelValues("0000:01:00.0", "a")); g != 0.25 {
			return nil, plugins.Errorf(plugins.CodePermanent, "progress gauge %v during the step", g)
		}
		if g := testutil.ToFloat64(h.e.m.inFlight); g != 1 {
			return nil, plugins.Errorf(plugins.CodePermanent, "runs_in_flight %v during the run", g)
		}
		runs := h.cp.Runs("0000:01:00.0")
		if recs := h.cp.Steps(runs[0].ID); recs[0].Progress != 0.25 {
			return nil, plugins.Errorf(plugins.CodePermanent, "stored progress %v", recs[0].Progress)
		}
		return plugins.OK(nil), nil
	}
	h.pr.clean["b"] = failN(1, plugins.CodeRetire)
	res := h.clean(t, target(1))
	if res.Verdict != VerdictQuarantine || res.Step != "b" {
		t.Fatalf("result %v", res)
	}
	want := `
# HELP scour_pipeline_runs_in_flight Cleaning runs in progress on this host.
# TYPE scour_pipeline_runs_in_flight gauge
scour_pipeline_runs_in_flight 0
# HELP scour_pipeline_runs_total Cleaning runs finished, by profile and verdict.
# TYPE scour_pipeline_runs_total counter
scour_pipeline_runs_total{profile="nvme",verdict="quarantine"} 1
# HELP scour_pipeline_retirements_total Devices retired (quarantined because a step said retire, e.g. a worn drive), by profile and whether the retirement wipe erased them first (wiped="false": the device may still hold the last tenant's data; destroy it).
# TYPE scour_pipeline_retirements_total counter
scour_pipeline_retirements_total{profile="nvme",wiped="false"} 1
scour_pipeline_retirements_total{profile="nvme",wiped="true"} 0
# HELP scour_pipeline_step_progress_ratio Progress (0..1) of the cleaning step running on a device.
# TYPE scour_pipeline_step_progress_ratio gauge
# HELP scour_pipeline_steps_total Cleaning steps finished, by profile, step and outcome (succeeded, failed, skipped).
# TYPE scour_pipeline_steps_total counter
scour_pipeline_steps_total{outcome="failed",profile="nvme",step="b"} 1
scour_pipeline_steps_total{outcome="failed",profile="nvme",step="retire-wipe"} 1
scour_pipeline_steps_total{outcome="skipped",profile="nvme",step="c"} 1
scour_pipeline_steps_total{outcome="succeeded",profile="nvme",step="a"} 1
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "scour_pipeline_runs_in_flight", "scour_pipeline_runs_total", "scour_pipeline_retirements_total",
		"scour_pipeline_step_progress_ratio", "scour_pipeline_steps_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(h.e.m.stepSeconds); n != 3 {
		t.Fatalf("%d duration series, want 3 (a succeeded, b and the retirement wipe failed)", n)
	}
}

// A step's progress goes to the gauge at once but is checkpointed (a
// committed write) only once the step has run progressEvery: a quick
// step costs no progress write.
func TestProgressCheckpointWaits(t *testing.T) {
	h := newHarness(t, testConfig(pluginStep("a")))
	if h.e.progressEvery != 5*time.Second {
		t.Fatalf("default progress checkpoint interval %v, want 5s", h.e.progressEvery)
	}
	h.pr.progress = map[string][]float64{"a": {0.25, 0.5, 1}}
	h.pr.clean["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		if g := testutil.ToFloat64(h.e.m.progress.WithLabelValues("0000:01:00.0", "a")); g != 1 {
			return nil, plugins.Errorf(plugins.CodePermanent, "progress gauge %v during the step, want 1", g)
		}
		runs := h.cp.Runs("0000:01:00.0")
		if recs := h.cp.Steps(runs[0].ID); recs[0].Progress != 0 {
			return nil, plugins.Errorf(plugins.CodePermanent, "stored progress %v within 5 s of the start, want none", recs[0].Progress)
		}
		return plugins.OK(nil), nil
	}
	if res := h.clean(t, target(1)); res.Verdict != VerdictClean {
		t.Fatalf("result %v", res)
	}
}
