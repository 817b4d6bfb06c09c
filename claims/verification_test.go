package claims

import (
	"context"
	"errors"
	"testing"
)

// A step that reports what it verified (details "verification", as the
// built-in verify and plugins do) is listed under the record's
// verification with method, amount read, expectation and result; the
// production path marks it from its details, not from a test-only flag.
func TestRecordVerificationFromStepDetails(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run, _, _ := s.OpenRun(ctx, nvmeRun())
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		st, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "verify", Index: 1})
		if err != nil {
			t.Fatal(err)
		}
		v := map[string]any{"method": "read-back with O_DIRECT of 64 sampled blocks", "bytes_read": 268435456, "samples": 64,
			"expected": "every byte 0x00", "result": "passed"}
		if err := s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepOK, Details: map[string]any{"verification": v}}); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Record(ctx, run.ID)
		if err != nil || len(rec.Verification) != 1 {
			t.Fatalf("record verification = %+v, %v", rec.Verification, err)
		}
		got := rec.Verification[0]
		if got.Name != "verify" || got.Outcome != "ok" || got.Result != "passed" || got.BytesRead != 268435456 || got.Samples != 64 ||
			got.Expected != "every byte 0x00" || got.Method == "" || !rec.Method.Steps[1].Verification {
			t.Fatalf("verification = %+v", got)
		}
	})
}

// A run whose pipeline claims purge is refused the clean verdict unless a
// verification passed in it.
func TestPurgeNeedsAPassedVerification(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		for _, c := range []struct {
			name   string
			result string // "" : no verifying step
			ok     bool
		}{{"no verification", "", false}, {"verification failed but step ok", "failed", false}, {"passed", "passed", true}} {
			rs := nvmeRun()
			rs.DeviceRP, rs.Category = "rp-"+c.name, CategoryPurge
			run, _, _ := s.OpenRun(ctx, rs)
			runStep(t, s, run.ID, "sanitize", false, StepOK, "")
			if c.result != "" {
				st, _ := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "verify", Index: 1})
				s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepOK, Details: map[string]any{"verification": map[string]any{"result": c.result}}})
			}
			err := s.FinishRun(ctx, run.ID, RunCleaned, "clean")
			if c.ok != (err == nil) || (!c.ok && !errors.Is(err, ErrNotClean)) {
				t.Errorf("%s: FinishRun(cleaned) = %v", c.name, err)
			}
		}
	})
}
