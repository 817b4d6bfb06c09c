package pipelinestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/pipeline"
)

// TestStepFinishedClosesOnlyItsOwnAttempt: StepFinished closes the attempt
// this process started. A step the engine decides without starting it
// (unsupported, pointless) while an attempt of the same step is left open
// (by a process that died, or by this one before a shutdown it resumed
// from) keeps that attempt as interrupted, never rewrites it as the
// decision.
func TestStepFinishedClosesOnlyItsOwnAttempt(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	start := pipeline.RunStart{Device: "0000:81:00.0", RPUUID: "rp-nvme-0", Profile: "nvme", Pipeline: "wipe", Steps: []string{"a", "b"}}
	cp := &Checkpoints{Store: s, Host: "compute-1"}
	run, _, err := cp.OpenRun(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	running := pipeline.StepRecord{Index: 0, Name: "a", State: pipeline.StepRunning}
	skipped := pipeline.StepRecord{Index: 0, Name: "a", State: pipeline.StepSkipped, Message: "skipped: unsupported"}
	// This process's own attempt: started, then closed as one row.
	if err := cp.StepStarted(ctx, run.ID, running); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepFinished(ctx, run.ID, pipeline.StepRecord{Index: 0, Name: "a", State: pipeline.StepSucceeded}); err != nil {
		t.Fatal(err)
	}
	// Step b starts; the process dies; a fresh one decides b unsupported.
	if err := cp.StepStarted(ctx, run.ID, pipeline.StepRecord{Index: 1, Name: "b", State: pipeline.StepRunning}); err != nil {
		t.Fatal(err)
	}
	fresh := &Checkpoints{Store: s, Host: "compute-1"}
	if again, _, err := fresh.OpenRun(ctx, start); err != nil || again.ID != run.ID {
		t.Fatalf("resume = %+v, %v; want run %s", again, err, run.ID)
	}
	if err := fresh.StepFinished(ctx, run.ID, pipeline.StepRecord{Index: 1, Name: "b", State: pipeline.StepFailed, Message: "unsupported"}); err != nil {
		t.Fatal(err)
	}
	// The same within one process: the engine stopped during a (a
	// shutdown) and resumed the run before deciding a.
	if err := fresh.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictRetryLater}); err != nil {
		t.Fatal(err)
	}
	run2, _, err := fresh.OpenRun(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.StepStarted(ctx, run2.ID, running); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fresh.OpenRun(ctx, start); err != nil {
		t.Fatal(err)
	}
	if err := fresh.StepFinished(ctx, run2.ID, skipped); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		run.ID:  "0:a#1=ok 1:b#1=interrupted 1:b#2=failed",
		run2.ID: "0:a#1=interrupted 0:a#2=skipped",
	} {
		steps, err := s.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(steps); got != want {
			t.Errorf("run %s steps = %s, want %s", id, got, want)
		}
	}
}
