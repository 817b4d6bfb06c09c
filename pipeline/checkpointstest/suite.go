// Package checkpointstest is the shared test suite every
// pipeline.Checkpoints implementation must pass (the in-memory and file
// stores here, the claims store's adapter there):
//
//	func TestCheckpoints(t *testing.T) {
//		checkpointstest.Run(t, func(t *testing.T) pipeline.Checkpoints { return newStore(t) })
//	}
//
// A store that keeps a contract the engine allows but the in-memory store
// does not use says so in Options (RunWith); the suite then checks that
// variant instead of skipping the assertion.
package checkpointstest

import (
	"context"
	"testing"
	"time"

	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// Options names the ways a store may legitimately differ from the
// in-memory one. The zero value is the in-memory store's behaviour.
type Options struct {
	// Return, when set, says a clean verdict keeps the run open until the
	// caller has returned the device to the pool: until then OpenRun
	// resumes the cleaned run, every step succeeded, so a crash between
	// the verdict and the un-reserve retries the un-reserve on the same
	// record instead of cleaning again (safety rule 5). Return closes the
	// run as the caller does after its un-reserve (the claims store:
	// MarkReturned). The suite checks the resume before calling it.
	Return func(t *testing.T, cp pipeline.Checkpoints, run pipeline.Run)
	// QuarantineResetsAttempts says a quarantine verdict, like a clean
	// one, starts the attempt count again: a quarantined device cleans
	// again only after an operator's unquarantine, which gets a full
	// budget of runs (the claims store). Without it the count goes on.
	QuarantineResetsAttempts bool
}

// Run runs the suite on a store with the in-memory store's behaviour;
// newStore returns an empty store for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) pipeline.Checkpoints) {
	RunWith(t, Options{}, newStore)
}

// RunWith runs the suite on a store that differs as o says.
func RunWith(t *testing.T, o Options, newStore func(t *testing.T) pipeline.Checkpoints) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, o Options, cp pipeline.Checkpoints)
	}{
		{"OpenRunResumesTheOpenRun", openRunResumes},
		{"StepRecordsReplaceByIndex", stepRecordsReplace},
		{"FinishedRunIsNotResumed", finishedRunNotResumed},
		{"AttemptsCountUntilClean", attemptsCount},
		{"DevicesAreIndependent", devicesIndependent},
		{"ClosedRunRefusesWrites", closedRunRefuses},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, o, newStore(t)) })
	}
}

func start(dev string) pipeline.RunStart {
	return pipeline.RunStart{Device: dev, RPUUID: "rp-" + dev, Profile: "nvme", Pipeline: "wipe", PipelineVersion: 2,
		Steps: []string{"a", "b"}, Started: time.Now().UTC().Truncate(time.Second), Category: pipeline.CategoryClear}
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

func openRunResumes(t *testing.T, _ Options, cp pipeline.Checkpoints) {
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
	// The engine resumes only a run of the category the config says now.
	if again.Start.Category != pipeline.CategoryClear {
		t.Fatalf("resumed run's category %q, want %q as it opened", again.Start.Category, pipeline.CategoryClear)
	}
	if len(recs) != 1 || recs[0].State != pipeline.StepRunning || recs[0].Name != "a" || recs[0].RunID != run.ID {
		t.Fatalf("records %+v", recs)
	}
}

func stepRecordsReplace(t *testing.T, _ Options, cp pipeline.Checkpoints) {
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

func finishedRunNotResumed(t *testing.T, _ Options, cp pipeline.Checkpoints) {
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
		done := rec(run, i, name, pipeline.StepSucceeded)
		if i == 0 {
			// The first step erased, as a clear run needs (a store may
			// refuse to clean one in which nothing did).
			done.Details = map[string]any{"k": "v", plugins.TechniqueKey: "overwrite, 1 pass of 0x00"}
		}
		if err := cp.StepFinished(ctx, run.ID, done); err != nil {
			t.Fatal(err)
		}
	}
}

// finishClean gives run, every step of it succeeded, the clean verdict;
// for a store whose cleaned run awaits the device's return, it checks that
// OpenRun resumes the run until then and returns the device.
func finishClean(t *testing.T, o Options, cp pipeline.Checkpoints, run pipeline.Run) {
	t.Helper()
	if err := cp.FinishRun(context.Background(), run.ID, pipeline.Result{Verdict: pipeline.VerdictClean, RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if o.Return == nil {
		return
	}
	again, recs := open(t, cp, run.Start.Device)
	if again.ID != run.ID || again.Attempt != run.Attempt || len(recs) != len(run.Start.Steps) {
		t.Fatalf("OpenRun of a cleaned run awaiting its return gave %+v with %d records; want run %s resumed", again, len(recs), run.ID)
	}
	for _, r := range recs {
		if r.State != pipeline.StepSucceeded {
			t.Fatalf("resumed cleaned run has step %d %s in state %s, want succeeded", r.Index, r.Name, r.State)
		}
	}
	o.Return(t, cp, again)
}

func attemptsCount(t *testing.T, o Options, cp pipeline.Checkpoints) {
	ctx := context.Background()
	var got []int
	for _, v := range []pipeline.Verdict{pipeline.VerdictRetryLater, pipeline.VerdictRetryLater, pipeline.VerdictClean, pipeline.VerdictQuarantine} {
		run, _ := open(t, cp, "0000:01:00.0")
		got = append(got, run.Attempt)
		if v == pipeline.VerdictClean {
			succeed(t, cp, run)
			finishClean(t, o, cp, run)
			continue
		}
		if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: v, RunID: run.ID}); err != nil {
			t.Fatal(err)
		}
	}
	run, _ := open(t, cp, "0000:01:00.0")
	got = append(got, run.Attempt)
	// retry-later, retry-later, clean (resets), quarantine, next.
	want := []int{1, 2, 3, 1, 2}
	if o.QuarantineResetsAttempts {
		want[4] = 1
	}
	if !equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
}

func devicesIndependent(t *testing.T, _ Options, cp pipeline.Checkpoints) {
	a, _ := open(t, cp, "0000:01:00.0")
	b, recs := open(t, cp, "0000:02:00.0")
	if a.ID == b.ID || b.Attempt != 1 || len(recs) != 0 {
		t.Fatalf("second device got %+v (first %+v)", b, a)
	}
}

func closedRunRefuses(t *testing.T, o Options, cp pipeline.Checkpoints) {
	ctx := context.Background()
	run, _ := open(t, cp, "0000:01:00.0")
	succeed(t, cp, run)
	if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictClean, RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StepStarted(ctx, run.ID, rec(run, 0, "a", pipeline.StepRunning)); err == nil {
		t.Fatal("StepStarted on a finished run succeeded")
	}
	if o.Return == nil {
		return
	}
	o.Return(t, cp, run)
	if err := cp.StepStarted(ctx, run.ID, rec(run, 0, "a", pipeline.StepRunning)); err == nil {
		t.Fatal("StepStarted on a returned run succeeded")
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
