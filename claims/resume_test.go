package claims

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Review finding (rev2, HIGH 2): an interrupted (running) run was resumed,
// its done steps (the erase) kept, even when the store itself recorded
// another consumer holding the device after the run started: the device
// left the fence while scourd was down (someone un-reserved it), served
// tenant B, and came back burned. The run is now closed, saying why (a
// WARN names device, run and reason), and a new run starts from the
// first step. A holder seen before the run started (its own previous
// tenant) does not stop the resume.
func TestRunningRunNotResumedAfterANewHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		var logs bytes.Buffer
		s := mustOpen(t, cfg, WithClock(clock.Now), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		rs := nvmeRun()
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-1"); err != nil { // the run's own tenant
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		run, _, err := s.OpenRun(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, run.ID, "sanitize", false, StepOK, "") // the erase, done; scourd stops before the next step
		clock.Advance(time.Hour)
		if again, resumed, err := s.OpenRun(ctx, rs); err != nil || !resumed || again.ID != run.ID {
			t.Fatalf("OpenRun with only the run's own tenant seen (before it started) = %s, resumed %v, %v; want run %s resumed", again.ID, resumed, err, run.ID)
		}
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-b"); err != nil { // scourd back: B holds it
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		again, resumed, err := s.OpenRun(ctx, rs) // B gone, device burned: dirty again
		if err != nil {
			t.Fatal(err)
		}
		if resumed || again.ID == run.ID {
			t.Fatalf("run %s resumed (its erase kept as done) although inst-b held the device after the run started", run.ID)
		}
		old, err := s.GetRun(ctx, run.ID)
		if err != nil || old.State != RunFailed || !old.Closed() || !strings.Contains(old.Summary, "superseded") || !strings.Contains(old.Summary, "inst-b") {
			t.Fatalf("interrupted run = %+v, %v; want closed failed, superseded, naming inst-b", old, err)
		}
		if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "run="+run.ID) ||
			!strings.Contains(got, "rp=rp-nvme-0") || !strings.Contains(got, "inst-b") {
			t.Fatalf("log = %s; want a WARN naming the device, run %s and inst-b", got, run.ID)
		}
	})
}

// A cleaned run waiting for its un-reserve is not resumed into one when a
// consumer held the device after the run started, even before its verdict
// (a run cleaned across a restart) or when it has no cleaned_at (before
// schema v3): it is closed as cleaned, not returned.
func TestCleanedRunNotResumedAfterAHolderSinceItStarted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		rs := nvmeRun()
		run, _, err := s.OpenRun(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-b"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		runStep(t, s, run.ID, "verify-zero", true, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		again, resumed, err := s.OpenRun(ctx, rs)
		if err != nil || resumed || again.ID == run.ID {
			t.Fatalf("OpenRun = %s, resumed %v, %v; want a new run: inst-b held the device after run %s started", again.ID, resumed, err, run.ID)
		}
		old, _ := s.GetRun(ctx, run.ID)
		if old.State != RunCleaned || !old.Closed() || !strings.Contains(old.Summary, "not returned") || !strings.Contains(old.Summary, "inst-b") {
			t.Fatalf("cleaned run = %+v; want closed as cleaned, not returned, naming inst-b", old)
		}
	})
}

// Review rev3 H1, layer 1: the un-reserve of a run never interrupted asks
// the store who held the device after the run started. Its own tenant,
// seen before the start, is nobody; a consumer a scan saw during the run
// (the fence lifted mid-verify, tenant X scheduled there, Nova's burn) is
// named, with the run, also once the run is cleaned.
func TestUsedSinceStartedForTheLiveUnreserve(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-1"); err != nil { // the run's own tenant
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		if why, err := s.UsedSinceStarted(ctx, run.ID); err != nil || why != "" {
			t.Fatalf("UsedSinceStarted with only the run's own tenant = %q, %v; want nobody", why, err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-x"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		runStep(t, s, run.ID, "verify-zero", true, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
			t.Fatal(err)
		}
		why, err := s.UsedSinceStarted(ctx, run.ID)
		if err != nil || !strings.Contains(why, "inst-x") || !strings.Contains(why, run.ID) {
			t.Fatalf("UsedSinceStarted after inst-x held the device mid-run = %q, %v; want it named, with run %s", why, err, run.ID)
		}
		if _, err := s.UsedSinceStarted(ctx, "no-such-run"); !errors.Is(err, ErrNoRun) {
			t.Fatalf("UsedSinceStarted of an unknown run: %v; want ErrNoRun", err)
		}
	})
}

// A holder is dated by the Placement read that saw it (SawHolderAt), not
// by the write: a claim that read the instance holding the device, and
// records it only after the device was freed and its release run began,
// names a tenant that run's erase covers, never one that came during it
// (found by e2e TestBootDeleteCleansAndReturns/legacy: the run refused
// its own un-reserve and the device was cleaned twice). A read time
// later than the store's clock counts as now.
func TestHolderDatedByTheReadThatSawIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		readAt := clock.Now() // the claim's allocation read began
		clock.Advance(time.Minute)
		run, _, err := s.OpenRun(ctx, nvmeRun()) // the release run
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolderAt(ctx, "compute-1", "rp-nvme-0", "inst-1", readAt); err != nil {
			t.Fatal(err)
		}
		if why, err := s.UsedSinceStarted(ctx, run.ID); err != nil || why != "" {
			t.Fatalf("UsedSinceStarted with a holder read before the run = %q, %v; want nobody", why, err)
		}
		if err := s.SawHolderAt(ctx, "compute-1", "rp-nvme-0", "inst-2", clock.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if why, err := s.UsedSinceStarted(ctx, run.ID); err != nil || !strings.Contains(why, "inst-2") {
			t.Fatalf("UsedSinceStarted with a holder dated in the future (taken as now) = %q, %v; want inst-2 named", why, err)
		}
	})
}

// A holder read before a newer one was recorded never replaces it while
// no clean covers the newer one: a slow claim whose instance was freed
// meanwhile (its holder dated by its old read, SawHolderAt) must not hide
// a tenant that came after the device's last clean (review rev7 F1: the
// device read "not held", and the scan's re-fence would miss it).
func TestOlderReadDoesNotHideANewerHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		readAt := clock.Now() // the slow claim read inst-x holding the device
		clock.Advance(time.Minute)
		cleanedRun(t, s, "rp-nvme-0") // inst-x freed, the device cleaned
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-y"); err != nil { // a tenant since
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolderAt(ctx, "compute-1", "rp-nvme-0", "inst-x", readAt); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || !ok || p.Instance != "inst-y" {
			t.Fatalf("PreviousTenant after a late write of an older read = %+v held=%v err=%v; want inst-y held", p, ok, err)
		}
	})
}
