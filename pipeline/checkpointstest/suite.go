// Package checkpointstest is the shared test suite every
// pipeline.Checkpoints implementation must pass (the in-memory and file
// stores here, the claims store's adapter there):
//
//	func TestCheckpoints(t *testing.T) {
//		checkpointstest.Run(t, func(t *testing.T) pipeline.Checkpoints { return newStore(t) })
//	}
package checkpointstest

import (
	"context"
	"testing"
	"time"

	"github.com/scour-project/scour/pipeline"
)

// Run runs the suite; newStore returns an empty store for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) pipeline.Checkpoints) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, cp pipeline.Checkpoints)
	}{
		{"OpenRunResumesTheOpenRun", openRunResumes},
		{"StepRecordsReplaceByIndex", stepRecordsReplace},
		{"FinishedRunIsNotResumed", finishedRunNotResumed},
		{"AttemptsCountUntilClean", attemptsCount},
		{"DevicesAreIndependent", devicesIndependent},
		{"ClosedRunRefusesWrites", closedRunRefuses},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, newStore(t)) })
	}
}

func start(dev string) pipeline.RunStart {
	return pipeline.RunStart{Device: dev, RPUUID: "rp-" + dev, Profile: "nvme", Pipeline: "wipe", PipelineVersion: 2,
		Steps: []string{"a", "b"}, Started: time.Now().UTC().Truncate(time.Second)}
}

func open(t *testing.T, cp pipeline.Checkpoints, dev string) (pipeline.Run, []pipeline.StepRecord) {
	t.Helper()
	run, recs, err := cp.OpenRun(context.Background(), start(dev))
	if err != nil {
		t.Fatalf("OpenRun(%s): %v", dev, err)
	}
	return run, recs
}

func rec(run pipeline.Run, i int, name string, st pipeline.StepState) pipeline.StepRecord {
	return pipeline.StepRecord{RunID: run.ID, Index: i, Name: name, State: st, Attempts: 1,
		Started: time.Now().UTC().Truncate(time.Second), Details: map[string]any{"k": "v"}}
}

func openRunResumes(t *testing.T, cp pipeline.Checkpoints) {
	ctx := context.Background()
	run, recs := open(t, cp, "0000:01:00.0")
	if run.ID == "" || run.Attempt != 1 || len(recs) != 0 {
		t.Fatalf("new run %+v with %d records", run, len(recs))
	}
	if run.Start.Pipeline != "wipe" || run.Start.PipelineVersion != 2 || len(run.Start.Steps) != 2 {
		t.Fatalf("run start not kept: %+v", run.Start)
	}
	if err := cp.StepStarted(ctx, run.ID, rec(run, 0, "a", pipeline.StepRunning)); err != nil {
		t.Fatal(err)
	}
	again, recs := open(t, cp, "0000:01:00.0")
	if again.ID != run.ID || again.Attempt != 1 {
		t.Fatalf("OpenRun of a device with an open run gave %+v, want run %s", again, run.ID)
	}
	if len(recs) != 1 || recs[0].State != pipeline.StepRunning || recs[0].Name != "a" || recs[0].RunID != run.ID {
		t.Fatalf("records %+v", recs)
	}
}

func stepRecordsReplace(t *testing.T, cp pipeline.Checkpoints) {
	ctx := context.Background()
	run, _ := open(t, cp, "0000:01:00.0")
	steps := []pipeline.StepRecord{rec(run, 0, "a", pipeline.StepRunning), rec(run, 0, "a", pipeline.StepSucceeded), rec(run, 1, "b", pipeline.StepRunning)}
	if err := cp.StepStarted(ctx, run.ID, steps[0]); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepProgress(ctx, run.ID, 0, 0.5); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepFinished(ctx, run.ID, steps[1]); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepStarted(ctx, run.ID, steps[2]); err != nil {
		t.Fatal(err)
	}
	_, recs := open(t, cp, "0000:01:00.0")
	if len(recs) != 2 {
		t.Fatalf("%d records, want one per step index: %+v", len(recs), recs)
	}
	byIndex := map[int]pipeline.StepRecord{}
	for _, r := range recs {
		byIndex[r.Index] = r
	}
	if byIndex[0].State != pipeline.StepSucceeded || byIndex[0].Details["k"] != "v" || byIndex[1].State != pipeline.StepRunning {
		t.Fatalf("records %+v", recs)
	}
}

func finishedRunNotResumed(t *testing.T, cp pipeline.Checkpoints) {
	ctx := context.Background()
	run, _ := open(t, cp, "0000:01:00.0")
	cp.StepFinished(ctx, run.ID, rec(run, 0, "a", pipeline.StepSucceeded))
	if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictRetryLater, RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	next, recs := open(t, cp, "0000:01:00.0")
	if next.ID == run.ID || len(recs) != 0 {
		t.Fatalf("after FinishRun, OpenRun returned %+v with %d records; want a new, empty run", next, len(recs))
	}
}

// succeed records every planned step as succeeded, as a clean run has.
func succeed(t *testing.T, cp pipeline.Checkpoints, run pipeline.Run) {
	t.Helper()
	ctx := context.Background()
	for i, name := range run.Start.Steps {
		if err := cp.StepStarted(ctx, run.ID, rec(run, i, name, pipeline.StepRunning)); err != nil {
			t.Fatal(err)
		}
		if err := cp.StepFinished(ctx, run.ID, rec(run, i, name, pipeline.StepSucceeded)); err != nil {
			t.Fatal(err)
		}
	}
}

func attemptsCount(t *testing.T, cp pipeline.Checkpoints) {
	ctx := context.Background()
	var got []int
	for _, v := range []pipeline.Verdict{pipeline.VerdictRetryLater, pipeline.VerdictRetryLater, pipeline.VerdictClean, pipeline.VerdictQuarantine} {
		run, _ := open(t, cp, "0000:01:00.0")
		got = append(got, run.Attempt)
		if v == pipeline.VerdictClean {
			succeed(t, cp, run)
		}
		if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: v, RunID: run.ID}); err != nil {
			t.Fatal(err)
		}
	}
	run, _ := open(t, cp, "0000:01:00.0")
	got = append(got, run.Attempt)
	// retry-later, retry-later, clean (resets), quarantine, next.
	if want := []int{1, 2, 3, 1, 2}; !equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
}

func devicesIndependent(t *testing.T, cp pipeline.Checkpoints) {
	a, _ := open(t, cp, "0000:01:00.0")
	b, recs := open(t, cp, "0000:02:00.0")
	if a.ID == b.ID || b.Attempt != 1 || len(recs) != 0 {
		t.Fatalf("second device got %+v (first %+v)", b, a)
	}
}

func closedRunRefuses(t *testing.T, cp pipeline.Checkpoints) {
	ctx := context.Background()
	run, _ := open(t, cp, "0000:01:00.0")
	succeed(t, cp, run)
	if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictClean, RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepStarted(ctx, run.ID, rec(run, 0, "a", pipeline.StepRunning)); err == nil {
		t.Fatal("StepStarted on a finished run succeeded")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
