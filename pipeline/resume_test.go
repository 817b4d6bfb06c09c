package pipeline

import (
	"context"
	"slices"
	"testing"
)

// seed stores an open run of the test pipeline with the given records.
func seed(t *testing.T, cp *MemCheckpoints, cfg Config, tg Target, states ...StepState) Run {
	t.Helper()
	cfg.setDefaults()
	r := &run{t: tg, prof: &cfg.Profiles[0]}
	run, _, err := cp.OpenRun(context.Background(), r.start())
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range states {
		rec := StepRecord{RunID: run.ID, Index: i, Name: cfg.Profiles[0].Pipeline.Steps[i].Name, State: st,
			Details: map[string]any{DefinitionKey: definition(&cfg.Profiles[0].Pipeline)}}
		cp.StepStarted(context.Background(), run.ID, rec)
	}
	return run
}

func TestResumeRunsOnlyUnfinishedSteps(t *testing.T) {
	cfg := testConfig(pluginStep("a"), pluginStep("b"), pluginStep("c"), pluginStep("d"))
	h := newHarness(t, cfg)
	tg := target(1)
	// a succeeded, b skipped, c was running when the process died.
	run := seed(t, h.cp, cfg, tg, StepSucceeded, StepSkipped, StepRunning)
	res := h.clean(t, tg)
	if res.Verdict != VerdictClean || res.RunID != run.ID {
		t.Fatalf("result %v run %s, want clean in resumed run %s", res, res.RunID, run.ID)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN c", "CLEAN d"}) {
		t.Fatalf("calls %v, want c re-run from its start, then d", got)
	}
}

func TestResumeReRunsFailedStep(t *testing.T) {
	cfg := testConfig(pluginStep("a"), pluginStep("b"))
	h := newHarness(t, cfg)
	seed(t, h.cp, cfg, target(1), StepSucceeded, StepFailed)
	if res := h.clean(t, target(1)); res.Verdict != VerdictClean {
		t.Fatalf("result %v", res)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN b"}) {
		t.Fatalf("calls %v", got)
	}
}

// Steps that succeeded in a finished run never count for a later run.
func TestFinishedRunIsNotResumed(t *testing.T) {
	cfg := testConfig(pluginStep("a"), pluginStep("b"))
	h := newHarness(t, cfg)
	run := seed(t, h.cp, cfg, target(1), StepSucceeded, StepFailed)
	h.cp.FinishRun(context.Background(), run.ID, Result{Verdict: VerdictRetryLater})
	res := h.clean(t, target(1))
	if res.Verdict != VerdictClean || res.RunID == run.ID {
		t.Fatalf("result %v in run %s", res, res.RunID)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN a", "CLEAN b"}) {
		t.Fatalf("calls %v, want every step again", got)
	}
}

// An open run of an older pipeline version is closed, not resumed.
func TestResumeOfChangedPipelineStartsOver(t *testing.T) {
	old := testConfig(pluginStep("a"), pluginStep("b"))
	run := Run{}
	h := newHarness(t, func() Config {
		c := testConfig(pluginStep("a"), pluginStep("b"))
		c.Profiles[0].Pipeline.Version = 2
		return c
	}())
	run = seed(t, h.cp, old, target(1), StepSucceeded)
	res := h.clean(t, target(1))
	if res.Verdict != VerdictClean || res.RunID == run.ID {
		t.Fatalf("result %v run %s", res, res.RunID)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN a", "CLEAN b"}) {
		t.Fatalf("calls %v", got)
	}
}
