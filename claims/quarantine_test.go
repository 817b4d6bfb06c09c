package claims

import (
	"context"
	"testing"
)

// A quarantine verdict opens a quarantine in the same transaction; it
// stays open (whatever Placement shows) until an operator releases it,
// and a later quarantine of the same device opens a new one.
func TestQuarantineRecordedWithVerdictUntilReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		start := nvmeRun()
		if _, ok, err := s.ActiveQuarantine(ctx, start.Host, start.DeviceRP); err != nil || ok {
			t.Fatalf("fresh device: quarantined=%v, %v", ok, err)
		}
		quarantine := func() Run {
			t.Helper()
			run, _, err := s.OpenRun(ctx, start)
			if err != nil {
				t.Fatal(err)
			}
			runStep(t, s, run.ID, "sanitize", false, StepFailed, "sanitize failed")
			if err := s.FinishRun(ctx, run.ID, RunQuarantined, "sanitize failed: retry budget exhausted"); err != nil {
				t.Fatal(err)
			}
			return run
		}
		run := quarantine()
		q, ok, err := s.ActiveQuarantine(ctx, start.Host, start.DeviceRP)
		if err != nil || !ok || q.RunID != run.ID || q.Reason != "sanitize failed: retry budget exhausted" || q.Address != start.Address || q.Retired() {
			t.Fatalf("after a quarantine verdict: %+v, %v, %v", q, ok, err)
		}
		if _, ok, _ := s.ActiveQuarantine(ctx, "other-host", start.DeviceRP); ok {
			t.Fatal("a quarantine leaked to another host")
		}
		if released, err := s.ReleaseQuarantine(ctx, start.Host, start.DeviceRP, "alice", "replaced the drive"); err != nil || !released {
			t.Fatalf("release: %v, %v", released, err)
		}
		if _, ok, _ := s.ActiveQuarantine(ctx, start.Host, start.DeviceRP); ok {
			t.Fatal("still quarantined after the release")
		}
		if released, err := s.ReleaseQuarantine(ctx, start.Host, start.DeviceRP, "alice", "again"); err != nil || released {
			t.Fatalf("second release: released=%v, %v; want nothing to release", released, err)
		}
		again := quarantine()
		if q, ok, _ := s.ActiveQuarantine(ctx, start.Host, start.DeviceRP); !ok || q.RunID != again.ID {
			t.Fatalf("second quarantine: %+v, %v", q, ok)
		}
	})
}
