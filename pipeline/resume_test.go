package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// genCheckpoints is a checkpoint store whose NoteClearGeneration fails.
type genCheckpoints struct {
	*MemCheckpoints
	noted []int
	err   error
}

func (c *genCheckpoints) NoteClearGeneration(_ context.Context, _ string, gen int) error {
	if c.err != nil {
		return c.err
	}
	c.noted = append(c.noted, gen)
	return nil
}

// genAlloc answers all-clear at Placement generation 7.
type genAlloc struct{}

func (genAlloc) HasAllocations(context.Context, string) (bool, error) { return false, nil }
func (genAlloc) CheckedGeneration(string) (int, bool)                 { return 7, true }
func (genAlloc) Generation(context.Context, string) (int, error)      { return 7, nil }

// A run that cannot store the generation of its first destructive
// step's all-clear does not start that step: without it the un-reserve
// would fall back to "nobody holds it now", which a tenant that came and
// went during the run passes. The run ends retry-later (the device stays
// reserved), naming the device and the store's error; the steps before
// it ran. With a working store the same run is clean and the generation
// is stored once.
func TestRunStopsWhenTheClearGenerationCannotBeStored(t *testing.T) {
	yes, no := true, false
	cfg := testConfig(pluginStep("check", func(s *Step) { s.Destructive = &no }),
		pluginStep("erase", func(s *Step) { s.Destructive = &yes }))
	for _, storeErr := range []error{errors.New("database is locked"), nil} {
		pr := newFakeRunner()
		cp := &genCheckpoints{MemCheckpoints: NewMemCheckpoints(), err: storeErr}
		h := newHarness(t, cfg)
		e, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: h.be, Checkpoints: cp, Plugins: pr,
			Registerer: prometheus.NewRegistry(), Allocations: genAlloc{}})
		if err != nil {
			t.Fatal(err)
		}
		h.e, h.pr = e, pr
		res := h.clean(t, target(1))
		if storeErr == nil {
			if res.Verdict != VerdictClean || !slices.Equal(cp.noted, []int{7}) {
				t.Fatalf("working store: verdict %s (%s), generations stored %v; want clean, [7]", res.Verdict, res.Reason, cp.noted)
			}
			continue
		}
		if got := pr.Calls(); !slices.Equal(got, []string{"CLEAN check"}) {
			t.Errorf("calls %v; want only the non-destructive check, never erase", got)
		}
		if res.Verdict != VerdictRetryLater || !strings.Contains(res.Reason, "0000:01:00.0") ||
			!strings.Contains(res.Reason, "database is locked") || !strings.Contains(res.Reason, "erase") {
			t.Errorf("verdict %s (%s); want retry-later naming the device, the step and the store error", res.Verdict, res.Reason)
		}
	}
}
