package claims

import (
	"context"
	"testing"
	"time"
)

// TestDecidedStepAfterCrashKeepsInterruptedAttempt: a step was running when
// the process died; the resumed engine decides the same step without
// starting it (unsupported on the device). The attempt that really began
// before the crash stays in the record as interrupted, with its own start;
// the decision is a new attempt after it.
func TestDecidedStepAfterCrashKeepsInterruptedAttempt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "sanitize", Index: 0}); err != nil {
			t.Fatal(err)
		}
		s.Close() // the process dies mid-step
		clock.Advance(10 * time.Minute)
		s = mustOpen(t, cfg, WithClock(clock.Now))
		if _, resumed, err := s.OpenRun(ctx, nvmeRun()); err != nil || !resumed {
			t.Fatalf("OpenRun after the crash: resumed %v, %v", resumed, err)
		}
		if err := s.FinishStep(ctx, StepStart{RunID: run.ID, Name: "sanitize", Index: 0},
			StepResult{Outcome: StepSkipped, Output: "skipped: unsupported"}); err != nil {
			t.Fatal(err)
		}
		steps, err := s.Steps(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(steps), 2; got != want {
			t.Fatalf("%d attempts (%+v), want the interrupted one and the decision", got, steps)
		}
		crashed, decided := steps[0], steps[1]
		if crashed.Outcome != StepInterrupted || !crashed.StartedAt.Equal(newFakeClock().Now()) || crashed.Attempt != 1 {
			t.Errorf("pre-crash attempt = %+v, want interrupted attempt 1 started before the crash", crashed)
		}
		if decided.Outcome != StepSkipped || decided.Attempt != 2 || !decided.StartedAt.Equal(clock.Now()) || decided.Output != "skipped: unsupported" {
			t.Errorf("decided attempt = %+v, want skipped attempt 2 started now", decided)
		}
	})
}
