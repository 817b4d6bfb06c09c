package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func nvmeRun() RunStart {
	return RunStart{Host: "compute-1", DeviceRP: "rp-nvme-0", Address: "0000:81:00.0", Serial: "S4EVNX0R", Model: "Samsung PM1733",
		PrevInstance: "inst-1", PrevProject: "proj-a", Profile: "nvme", Pipeline: "nvme-sanitize", PipelineVersion: "3", PlannedSteps: []string{"sanitize", "verify-zero"},
		Trigger: "instance.delete.end msg-9"}
}

// runStep records one attempt from start to outcome, as the engine does;
// a verify step reports a passed verification.
func runStep(t *testing.T, s *Store, runID, name string, verify bool, outcome StepOutcome, output string) Step {
	t.Helper()
	ctx := context.Background()
	st, err := s.StepStarted(ctx, StepStart{RunID: runID, Name: name, Verification: verify})
	if err != nil {
		t.Fatalf("StepStarted %s: %v", name, err)
	}
	if err := s.StepProgress(ctx, runID, st.Seq, 50); err != nil {
		t.Fatalf("StepProgress %s: %v", name, err)
	}
	var details map[string]any
	if verify {
		details = map[string]any{"verification": map[string]any{"method": "read-back", "bytes_read": 4096, "expected": "every byte 0x00", "result": "passed"}}
	}
	if err := s.StepFinished(ctx, runID, st.Seq, StepResult{Outcome: outcome, Output: output, Details: details}); err != nil {
		t.Fatalf("StepFinished %s: %v", name, err)
	}
	return st
}

func TestRunCheckpointResume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		run, resumed, err := s.OpenRun(ctx, nvmeRun())
		if err != nil || resumed || run.State != RunRunning {
			t.Fatalf("OpenRun = %+v, %v, %v", run, resumed, err)
		}
		runStep(t, s, run.ID, "check-allocation", false, StepOK, "no allocation")
		clock.Advance(time.Second)
		wipe, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "sanitize"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StepProgress(ctx, run.ID, wipe.Seq, 40); err != nil {
			t.Fatal(err)
		}
		// The process dies here, mid-sanitize. A new process opens the store.
		s.Close()
		s = mustOpen(t, cfg, WithClock(clock.Now))
		again, resumed, err := s.OpenRun(ctx, nvmeRun())
		if err != nil || !resumed || again.ID != run.ID {
			t.Fatalf("OpenRun after restart = %+v, resumed %v, %v; want the same run", again, resumed, err)
		}
		if un, _ := s.UnfinishedRuns(ctx, "compute-1"); len(un) != 1 || un[0].ID != run.ID {
			t.Fatalf("UnfinishedRuns = %+v", un)
		}
		last, ok, err := s.LastCompletedStep(ctx, run.ID)
		if err != nil || !ok || last.Name != "check-allocation" {
			t.Fatalf("LastCompletedStep = %+v, %v, %v; want check-allocation (sanitize was interrupted)", last, ok, err)
		}
		steps, _ := s.Steps(ctx, run.ID)
		if len(steps) != 2 || steps[1].Name != "sanitize" || steps[1].EndedAt != nil || steps[1].Progress != 40 {
			t.Fatalf("steps before resume = %+v", steps)
		}
		// Re-running the interrupted step from its start: attempt 2.
		clock.Advance(time.Second)
		wipe2 := runStep(t, s, run.ID, "sanitize", false, StepOK, "sanitize complete")
		if wipe2.Attempt != 2 || wipe2.Seq != 3 {
			t.Fatalf("resumed sanitize = attempt %d seq %d, want 2 and 3", wipe2.Attempt, wipe2.Seq)
		}
		// The old attempt cannot be finished any more.
		if err := s.StepFinished(ctx, run.ID, wipe.Seq, StepResult{Outcome: StepOK}); !errors.Is(err, ErrNoStep) {
			t.Fatalf("finishing the superseded attempt: %v, want ErrNoStep", err)
		}
		runStep(t, s, run.ID, "verify-zero", true, StepOK, "read back 0 non-zero blocks")
		steps, _ = s.Steps(ctx, run.ID)
		want := []struct {
			name    string
			attempt int
			outcome StepOutcome
			prog    int
		}{{"check-allocation", 1, StepOK, 100}, {"sanitize", 1, StepInterrupted, 40}, {"sanitize", 2, StepOK, 100}, {"verify-zero", 1, StepOK, 100}}
		if len(steps) != len(want) {
			t.Fatalf("steps = %+v", steps)
		}
		for i, w := range want {
			st := steps[i]
			if st.Name != w.name || st.Attempt != w.attempt || st.Outcome != w.outcome || st.Progress != w.prog || st.EndedAt == nil {
				t.Errorf("step %d = %+v, want %+v", i, st, w)
			}
		}
		if err := s.FinishRun(ctx, run.ID, RunReturned, "all steps passed"); err == nil {
			t.Fatal("FinishRun(returned) accepted: only MarkReturned, after the un-reserve, may say returned")
		}
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "all steps passed"); err != nil {
			t.Fatalf("FinishRun: %v", err)
		}
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "again"); err != nil {
			t.Fatalf("repeating FinishRun with the same verdict: %v", err)
		}
		if err := s.MarkReturned(ctx, run.ID, ""); err != nil {
			t.Fatalf("MarkReturned: %v", err)
		}
		if err := s.MarkReturned(ctx, run.ID, "again"); err != nil {
			t.Fatalf("repeating MarkReturned: %v", err)
		}
		// Sealed: no more steps, no other verdict.
		if _, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "late"}); !errors.Is(err, ErrRunFinished) {
			t.Fatalf("StepStarted on finished run: %v, want ErrRunFinished", err)
		}
		if err := s.FinishRun(ctx, run.ID, RunQuarantined, ""); !errors.Is(err, ErrRunFinished) {
			t.Fatalf("changing a verdict: %v, want ErrRunFinished", err)
		}
		got, _ := s.GetRun(ctx, run.ID)
		if got.State != RunReturned || got.Summary != "all steps passed" || got.EndedAt == nil {
			t.Fatalf("finished run = %+v", got)
		}
		// The next dirty period of the device is a new run.
		next, resumed, err := s.OpenRun(ctx, nvmeRun())
		if err != nil || resumed || next.ID == run.ID {
			t.Fatalf("OpenRun after finish = %+v, %v, %v; want a new run", next, resumed, err)
		}
	})
}

func TestFinishRunReturnedNeedsCleanSteps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		cases := []struct {
			name  string
			steps func(runID string)
			ok    bool
		}{
			{"no steps", func(string) {}, false},
			{"failed step", func(id string) { runStep(t, s, id, "sanitize", false, StepFailed, "I/O error") }, false},
			{"failed then ok", func(id string) {
				runStep(t, s, id, "sanitize", false, StepFailed, "I/O error")
				runStep(t, s, id, "sanitize", false, StepOK, "")
			}, true},
			{"ok then skipped", func(id string) {
				runStep(t, s, id, "sanitize", false, StepOK, "")
				runStep(t, s, id, "firmware", false, StepSkipped, "no update")
			}, true},
			{"optional step failed", func(id string) {
				runStep(t, s, id, "sanitize", false, StepOK, "")
				st, err := s.StepStarted(ctx, StepStart{RunID: id, Name: "smart-log", Index: 1, Optional: true})
				if err == nil {
					err = s.StepFinished(ctx, id, st.Seq, StepResult{Outcome: StepFailed, Code: 101, Output: "log page unsupported"})
				}
				if err != nil {
					t.Fatal(err)
				}
			}, true},
			{"optional step still running", func(id string) {
				runStep(t, s, id, "sanitize", false, StepOK, "")
				if _, err := s.StepStarted(ctx, StepStart{RunID: id, Name: "smart-log", Index: 1, Optional: true}); err != nil {
					t.Fatal(err)
				}
			}, false},
			{"step still running", func(id string) {
				runStep(t, s, id, "sanitize", false, StepOK, "")
				if _, err := s.StepStarted(ctx, StepStart{RunID: id, Name: "verify"}); err != nil {
					t.Fatal(err)
				}
			}, false},
		}
		for i, c := range cases {
			rs := nvmeRun()
			rs.DeviceRP = "rp-" + c.name
			run, _, err := s.OpenRun(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			c.steps(run.ID)
			err = s.FinishRun(ctx, run.ID, RunCleaned, "")
			if c.ok != (err == nil) || (!c.ok && !errors.Is(err, ErrNotClean)) {
				t.Errorf("case %d %s: FinishRun(cleaned) = %v", i, c.name, err)
			}
			if !c.ok { // a failed cleaning can always be quarantined
				if err := s.FinishRun(ctx, run.ID, RunQuarantined, "sanitize failed"); err != nil {
					t.Errorf("case %s: quarantine: %v", c.name, err)
				}
			}
		}
		if err := s.FinishRun(ctx, "no-such-run", RunAborted, ""); !errors.Is(err, ErrNoRun) {
			t.Errorf("FinishRun(unknown) = %v, want ErrNoRun", err)
		}
		if err := s.FinishRun(ctx, "x", RunRunning, ""); err == nil {
			t.Error("FinishRun(running) accepted a non-verdict")
		}
		if _, _, err := s.OpenRun(ctx, RunStart{}); err == nil || !strings.Contains(err.Error(), "host is empty") {
			t.Errorf("OpenRun(empty) = %v", err)
		}
	})
}

func TestConcurrentOpenRunOneUnfinishedPerDevice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		const workers = 8
		ids := make(chan string, workers)
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run, _, err := s.OpenRun(ctx, nvmeRun())
				ids <- run.ID
				errs <- err
			}()
		}
		wg.Wait()
		close(ids)
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		distinct := map[string]bool{}
		for id := range ids {
			distinct[id] = true
		}
		if len(distinct) != 1 {
			t.Fatalf("%d distinct runs opened concurrently for one device, want 1", len(distinct))
		}
		// The database itself refuses a second unfinished run.
		_, err := s.w.ExecContext(ctx, s.d.rebind(`INSERT INTO cleaning_runs (id, host, device_rp, state, started_at) VALUES (?, ?, ?, 'running', ?)`),
			"dup", "compute-1", "rp-nvme-0", s.stamp())
		if err == nil {
			t.Fatal("a second unfinished run for the device was accepted by the schema")
		}
	})
}

func TestStepOutputBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		s := mustOpen(t, cfg)
		run, _, _ := s.OpenRun(context.Background(), nvmeRun())
		long := "HEAD" + strings.Repeat("x", 100000) + "\xff" + "TAIL"
		runStep(t, s, run.ID, "overwrite", false, StepOK, long)
		steps, _ := s.Steps(context.Background(), run.ID)
		out := steps[0].Output
		if len(out) > MaxOutputBytes || !strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "TAIL") || !strings.Contains(out, "truncated") {
			t.Fatalf("bounded output: %d bytes, head %q tail %q", len(out), out[:10], out[len(out)-10:])
		}
	})
}

func TestRecordExportRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		run, _, _ := s.OpenRun(ctx, nvmeRun())
		st, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "sanitize", Index: 0})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepOK, Output: "crypto erase done",
			Details: map[string]any{"method": "crypto", "blocks": 1024}, Stderr: "nvme: sanitize started"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(90 * time.Second)
		st, err = s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "verify-zero", Index: 1, Verification: true})
		if err == nil {
			err = s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepOK, Output: "0 non-zero blocks in 4096 samples",
				Details: map[string]any{"verification": map[string]any{"method": "read-back", "bytes_read": 4096, "expected": "every byte 0x00", "result": "passed"}}})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := finish(ctx, s, run.ID, RunReturned, "clean"); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Record(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := rec.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := ParseRecord(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(rec, back); diff != "" {
			t.Fatalf("record changed in a JSON round trip (-stored +parsed):\n%s", diff)
		}
		t0 := newFakeClock().Now()
		end := t0.Add(90 * time.Second)
		want := Record{
			Format: RecordFormat, SchemaVersions: LatestVersions(), RunID: run.ID, Attempt: 1, Host: "compute-1",
			Device:         RecordDevice{ResourceProvider: "rp-nvme-0", PCIAddress: "0000:81:00.0", Serial: "S4EVNX0R", Model: "Samsung PM1733"},
			PreviousTenant: RecordTenant{InstanceUUID: "inst-1", ProjectID: "proj-a"},
			Method: RecordMethod{Profile: "nvme", Pipeline: "nvme-sanitize", PipelineVersion: "3", PlannedSteps: []string{"sanitize", "verify-zero"}, Steps: []RecordStep{
				{Seq: 1, Index: 0, Name: "sanitize", Attempt: 1, Outcome: "ok", Output: "crypto erase done", Code: 0,
					Details: map[string]any{"method": "crypto", "blocks": 1024.0}, Stderr: "nvme: sanitize started", Progress: 100, StartedAt: t0, EndedAt: &t0},
				{Seq: 2, Index: 1, Name: "verify-zero", Attempt: 1, Verification: true, Outcome: "ok", Output: "0 non-zero blocks in 4096 samples", Progress: 100, StartedAt: end, EndedAt: &end,
					Details: map[string]any{"verification": map[string]any{"method": "read-back", "bytes_read": 4096.0, "expected": "every byte 0x00", "result": "passed"}}},
			}},
			Result:      RecordResult{State: "returned", Summary: "clean"},
			TriggeredBy: "instance.delete.end msg-9", StartedAt: t0, EndedAt: &end, GeneratedAt: end,
		}
		want.PerformedBy = RecordPerformer{Service: "scourd", Host: "compute-1"}
		want.Sanitization = RecordSanitization{Techniques: []RecordTechnique{}, Tools: []RecordTool{}}
		want.Verification = []RecordVerification{{Seq: 2, Name: "verify-zero", Attempt: 1, Outcome: "ok", EndedAt: &end}}
		want.Verification[0].Method, want.Verification[0].BytesRead, want.Verification[0].Expected = "read-back", 4096, "every byte 0x00"
		want.Verification[0].Result = "passed"
		if diff := cmp.Diff(want, back); diff != "" {
			t.Fatalf("exported record (-want +got):\n%s\n%s", diff, buf.String())
		}
		for _, key := range []string{`"format": "scour.cleaning-record/v2"`, `"resource_provider_uuid": "rp-nvme-0"`, `"verification": [`, `"state": "returned"`} {
			if !strings.Contains(buf.String(), key) {
				t.Errorf("JSON lacks %s:\n%s", key, buf.String())
			}
		}
		if _, err := ParseRecord([]byte(`{"format":"other/v9"}`)); err == nil {
			t.Error("ParseRecord accepted a foreign format")
		}
		// A run found dirty without a claim names an unknown tenant.
		rs := nvmeRun()
		rs.DeviceRP, rs.PrevInstance, rs.PrevProject = "rp-other", "", ""
		r2, _, _ := s.OpenRun(ctx, rs)
		rec2, _ := s.Record(ctx, r2.ID)
		if rec2.PreviousTenant != (RecordTenant{UnknownTenant, UnknownTenant}) || rec2.Result.State != "running" || rec2.EndedAt != nil {
			t.Fatalf("record of unclaimed running run = %+v", rec2)
		}
		list, err := s.ListRuns(ctx, RunFilter{Device: "0000:81:00.0", State: RunReturned})
		if err != nil || len(list) != 1 || list[0].ID != run.ID {
			t.Fatalf("ListRuns by address = %+v, %v", list, err)
		}
	})
}

func TestPurgeKeepsUnfinishedAndRecent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention = 30 * 24 * time.Hour
		s := mustOpen(t, cfg, WithClock(clock.Now))
		open := func(dev string) Run {
			rs := nvmeRun()
			rs.DeviceRP = dev
			r, _, err := s.OpenRun(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			runStep(t, s, r.ID, "sanitize", false, StepOK, "")
			return r
		}
		old := open("rp-old")
		if err := finish(ctx, s, old.ID, RunReturned, ""); err != nil {
			t.Fatal(err)
		}
		stuck := open("rp-stuck") // never finished: must survive any age
		if _, err := s.RecordClaim(ctx, gpuClaim("old-inst", "rp-old")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordClaim(ctx, gpuClaim("live-inst", "rp-live")); err != nil {
			t.Fatal(err)
		}
		s.ReleaseInstance(ctx, "compute-1", "old-inst", "deleted", "m")
		clock.Advance(31 * 24 * time.Hour)
		recent := open("rp-recent")
		if err := s.FinishRun(ctx, recent.ID, RunQuarantined, ""); err != nil {
			t.Fatal(err)
		}
		// Never exported: kept, however old (the proof must leave the
		// store before retention may drop it).
		if runs, claims, err := s.Purge(ctx, "compute-1"); err != nil || runs != 0 || claims != 1 {
			t.Fatalf("Purge before any export = %d runs, %d claims, %v; want 0, 1", runs, claims, err)
		}
		if err := s.MarkExported(ctx, old.ID, recent.ID); err != nil {
			t.Fatal(err)
		}
		runs, claims, err := s.Purge(ctx, "compute-1")
		if err != nil || runs != 1 || claims != 0 {
			t.Fatalf("Purge = %d runs, %d claims, %v; want 1, 0", runs, claims, err)
		}
		if _, err := s.GetRun(ctx, old.ID); !errors.Is(err, ErrNoRun) {
			t.Fatalf("old run still there: %v", err)
		}
		if st, _ := s.Steps(ctx, old.ID); len(st) != 0 {
			t.Fatalf("old run's steps still there: %d", len(st))
		}
		for _, id := range []string{stuck.ID, recent.ID} {
			if _, err := s.GetRun(ctx, id); err != nil {
				t.Fatalf("run %s purged: %v", id, err)
			}
		}
		if live, _ := s.LiveClaims(ctx, "compute-1"); len(live) != 1 {
			t.Fatalf("live claims after purge: %+v", live)
		}
		// The purged claim's device index went with it; the live one's stays.
		var indexed []string
		rows, err := s.r.QueryContext(ctx, `SELECT device_rp FROM claim_devices ORDER BY device_rp`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var rp string
			rows.Scan(&rp)
			indexed = append(indexed, rp)
		}
		rows.Close()
		if fmt.Sprint(indexed) != "[rp-live]" {
			t.Fatalf("claim_devices after purge = %v, want [rp-live]", indexed)
		}
	})
}

// TestFinishedRunSealedByDatabase proves the database itself refuses to
// change a finished record, whoever writes, while retention can still
// delete it.
func TestFinishedRunSealedByDatabase(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention = time.Hour
		s := mustOpen(t, cfg, WithClock(clock.Now))
		run, _, _ := s.OpenRun(ctx, nvmeRun())
		st := runStep(t, s, run.ID, "sanitize", false, StepOK, "done")
		// Before the verdict, raw updates are allowed (the store makes them).
		if _, err := s.w.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET summary = ? WHERE id = ?`), "in progress", run.ID); err != nil {
			t.Fatalf("update of a running run: %v", err)
		}
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReturned(ctx, run.ID, "clean"); err != nil {
			t.Fatal(err)
		}
		for name, q := range map[string]string{
			"run update":  `UPDATE cleaning_runs SET state = 'quarantined' WHERE id = '` + run.ID + `'`,
			"step update": `UPDATE cleaning_steps SET outcome = 'failed' WHERE run_id = '` + run.ID + `'`,
			"step insert": `INSERT INTO cleaning_steps (run_id, seq, name, attempt, started_at) VALUES ('` + run.ID + `', 9, 'late', 1, '2026-01-01T00:00:00.000000Z')`,
		} {
			_, err := s.w.ExecContext(ctx, q)
			if err == nil || !strings.Contains(err.Error(), "sealed") {
				t.Errorf("%s of a finished run: %v; want refused as sealed", name, err)
			}
		}
		if rec, _ := s.Record(ctx, run.ID); rec.Result.State != "returned" || rec.Method.Steps[0].Outcome != "ok" || len(rec.Method.Steps) != st.Seq {
			t.Fatalf("sealed record changed: %+v", rec)
		}
		clock.Advance(2 * time.Hour)
		if err := s.MarkExported(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
		if runs, _, err := s.Purge(ctx, "compute-1"); err != nil || runs != 1 {
			t.Fatalf("purge of a sealed run = %d, %v", runs, err)
		}
	})
}

// Aborted runs never tested the device and do not count.
// Attempts count since the device was last returned or quarantined: a
// quarantined device comes back only by an operator's unquarantine, and
// its next run must get the whole retry budget again instead of being
// re-quarantined by its first recoverable failure.
func TestRunAttemptsCountSinceLastReturned(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		verdicts := []struct {
			state RunState
			want  int // Attempt of the run that gets this verdict
		}{{RunFailed, 1}, {RunFailed, 2}, {RunReturned, 3}, {RunAborted, 1}, {RunAborted, 1}, {RunQuarantined, 1}, {RunFailed, 1}, {RunReturned, 2}}
		for i, v := range verdicts {
			clock.Advance(time.Minute)
			run, resumed, err := s.OpenRun(ctx, nvmeRun())
			if err != nil || resumed || run.Attempt != v.want {
				t.Fatalf("run %d: Attempt %d (resumed %v, %v), want %d", i, run.Attempt, resumed, err, v.want)
			}
			clock.Advance(time.Second)
			if again, resumed, _ := s.OpenRun(ctx, nvmeRun()); !resumed || again.Attempt != v.want || again.Profile != "nvme" ||
				len(again.PlannedSteps) != 2 || again.PlannedSteps[1] != "verify-zero" {
				t.Fatalf("run %d reopened = %+v", i, again)
			}
			runStep(t, s, run.ID, "sanitize", false, StepOK, "")
			if err := finish(ctx, s, run.ID, v.state, "verdict"); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.GetRun(ctx, run.ID); got.Attempt != v.want || got.State != v.state {
				t.Fatalf("run %d after finish = %+v", i, got)
			}
		}
		other := nvmeRun()
		other.DeviceRP = "rp-other"
		if r, _, _ := s.OpenRun(ctx, other); r.Attempt != 1 {
			t.Fatalf("another device's first run has Attempt %d", r.Attempt)
		}
	})
}

func TestStepDetailsStoredAndBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run, _, _ := s.OpenRun(ctx, nvmeRun())
		for i, d := range []map[string]any{{"sanitize_status": "0x0101", "passes": 1.0}, {"blob": strings.Repeat("z", 3*MaxOutputBytes)}} {
			st, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "sanitize", Index: i})
			if err == nil {
				err = s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepFailed, Code: 102, Details: d, Stderr: strings.Repeat("e", 10000)})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		steps, _ := s.Steps(ctx, run.ID)
		if steps[0].Code != 102 || steps[0].Details["sanitize_status"] != "0x0101" || steps[0].Index != 0 || len(steps[0].Stderr) > MaxOutputBytes {
			t.Fatalf("step 1 = %+v", steps[0])
		}
		b, _ := json.Marshal(steps[1].Details)
		if _, ok := steps[1].Details["truncated_keys"]; !ok || len(b) > MaxOutputBytes || steps[1].Index != 1 {
			t.Fatalf("oversized details stored as %d bytes: %s", len(b), b)
		}
	})
}

// StepIndexProgress addresses the open attempt by its pipeline step, and
// FinishStep records a step decided without being started, in one
// transaction each: the engine's path.
func TestStepByIndex(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		erase, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "erase", Index: 0})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StepIndexProgress(ctx, run.ID, 0, 30); err != nil {
			t.Fatal(err)
		}
		if err := s.StepIndexProgress(ctx, run.ID, 1, 30); !errors.Is(err, ErrNoStep) {
			t.Fatalf("progress of a step with no open attempt: %v, want ErrNoStep", err)
		}
		// erase closes by its seq; smart (never started) gets an attempt
		// started and ended at once; wear, decided while verify is open,
		// closes verify as interrupted (never two open attempts).
		if err := s.StepFinished(ctx, run.ID, erase.Seq, StepResult{Outcome: StepOK, Output: "formatted"}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: run.ID, Name: "smart", Index: 1, Optional: true},
			StepResult{Outcome: StepSkipped, Output: "no log page"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "verify", Index: 2}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: run.ID, Name: "wear", Index: 3}, StepResult{Outcome: StepFailed, Code: 102}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: run.ID, Name: "wear", Index: 3}, StepResult{Outcome: "bogus"}); err == nil {
			t.Fatal("FinishStep accepted outcome bogus")
		}
		steps, err := s.Steps(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			name     string
			outcome  StepOutcome
			progress int
			optional bool
		}
		want := []row{{"erase", StepOK, 100, false}, {"smart", StepSkipped, 0, true}, {"verify", StepInterrupted, 0, false}, {"wear", StepFailed, 0, false}}
		if len(steps) != len(want) {
			t.Fatalf("steps = %+v", steps)
		}
		for i, w := range want {
			st := steps[i]
			if got := (row{st.Name, st.Outcome, st.Progress, st.Optional}); got != w || st.EndedAt == nil || st.Seq != i+1 {
				t.Errorf("step %d = %+v, want %+v", i, st, w)
			}
		}
		if err := s.FinishRun(ctx, run.ID, RunQuarantined, "wear"); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: run.ID, Name: "late", Index: 4}, StepResult{Outcome: StepOK}); !errors.Is(err, ErrRunFinished) {
			t.Fatalf("FinishStep on a finished run: %v, want ErrRunFinished", err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: "no-such-run", Name: "x"}, StepResult{Outcome: StepOK}); !errors.Is(err, ErrNoRun) {
			t.Fatalf("FinishStep on an unknown run: %v, want ErrNoRun", err)
		}
	})
}
