package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/handlers"
)

// Only a clean verdict un-reserves, exactly once; quarantine keeps the
// device reserved with the trait; retry-later, no-profile and cleaner
// errors back off; aborted leaves the device alone.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		verdict     pipeline.Verdict
		err         error
		want        placement.State
		unreserves  int
		quarantines int
		backsOff    bool
	}{
		{verdict: pipeline.VerdictClean, want: placement.StateAvailable, unreserves: 1},
		{verdict: pipeline.VerdictQuarantine, want: placement.StateQuarantined, quarantines: 1},
		{verdict: pipeline.VerdictRetryLater, want: placement.StateDirty, backsOff: true},
		{verdict: pipeline.VerdictNoProfile, want: placement.StateDirty, backsOff: true},
		{verdict: pipeline.VerdictAborted, want: placement.StateDirty},
		{verdict: "nonsense", want: placement.StateDirty, backsOff: true},
		{err: errors.New("engine exploded"), want: placement.StateDirty, backsOff: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.verdict)+errString(tt.err), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, func(c *handlers.Config) { c.BackoffBase, c.BackoffMax = time.Minute, time.Hour })
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
			e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
				return handlers.CleanResult{Verdict: tt.verdict, RunID: "run-1", Detail: "because"}, tt.err
			}
			e.reconcile()
			e.wantDevice(1, tt.want, 1, tt.unreserves)
			if got := e.w.Count("quarantine", rp(1)); got != tt.quarantines {
				t.Errorf("quarantines = %d, want %d", got, tt.quarantines)
			}
			e.reconcile() // at once: a backing-off device is not run again
			wantRuns := 2
			if tt.backsOff || tt.want != placement.StateDirty {
				wantRuns = 1
			}
			if got := e.cl.CallsFor(rp(1)); got != wantRuns {
				t.Errorf("runs after an immediate second scan = %d, want %d", got, wantRuns)
			}
			if tt.backsOff {
				e.clock.Advance(2 * time.Minute) // past the first backoff (1m ±20%)
				e.reconcile()
				if got := e.cl.CallsFor(rp(1)); got != 2 {
					t.Errorf("runs after the backoff = %d, want 2", got)
				}
				e.reconcile() // second failure: the backoff doubled
				e.clock.Advance(90 * time.Second)
				e.reconcile()
				if got := e.cl.CallsFor(rp(1)); got != 2 {
					t.Errorf("runs 90s into the doubled backoff = %d, want 2", got)
				}
			}
		})
	}
}

func errString(err error) string {
	if err != nil {
		return "error"
	}
	return ""
}

// Un-reserve refused because an allocation appeared after the clean: the
// device is left alone, not retried as a failure, not returned.
func TestUnreserveRefusedWhenAllocated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		e.w.Allocate("00000000-0000-4000-8000-00000000000d", false, rp(1)) // between "dirty" and "un-reserve"
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	e.reconcile()
	if got := e.w.Count("unreserve", rp(1)); got != 0 {
		t.Errorf("un-reserves = %d, want 0", got)
	}
	if d := e.w.Device(rp(1)); d.Reserved != 1 {
		t.Errorf("reserved = %d, want 1", d.Reserved)
	}
}

// A failed un-reserve (Placement down) keeps the device reserved and the
// device is tried again after its backoff, and then returned once.
func TestUnreserveFailureRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	down := true
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		if down {
			return errors.New("placement: 503")
		}
		return e.w.Unreserve(ctx, d)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateDirty, 1, 0)
	down = false
	e.clock.Advance(time.Hour)
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// A quarantine whose trait write fails is retried later; the device stays
// reserved all along.
func TestQuarantineWriteFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		return handlers.CleanResult{Verdict: pipeline.VerdictQuarantine, Detail: "percent_used 97 >= 90"}, nil
	}
	fail := true
	e.p.QuarantineF = func(ctx context.Context, d handlers.Device, reason string) error {
		if fail {
			return errors.New("placement: 503")
		}
		return e.w.Quarantine(ctx, d, reason)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateDirty, 1, 0)
	fail = false
	e.clock.Advance(time.Hour)
	e.reconcile()
	e.wantDevice(1, placement.StateQuarantined, 2, 0)
	if got := e.cl.Quarantined(); len(got) != 1 {
		t.Errorf("records closed as quarantined = %v, want 1", got)
	}
}

// An un-reserve refused as a stale return (this run's earlier PUT may
// have landed before scourd stopped, and the device served a tenant
// since) closes the run's record as not returned and leaves the device
// reserved; the next scan cleans it again with a new run, which returns
// it.
func TestStaleReturnCleansAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	stale := true
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		if stale {
			stale = false
			return fmt.Errorf("placement unreserve: %w", placement.ErrStaleReturn)
		}
		return e.w.Unreserve(ctx, d)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateDirty, 1, 0)
	if got := e.cl.NotReturned(); len(got) != 1 || !strings.HasPrefix(got[0], "run-1 final=true: ") || !strings.Contains(got[0], "cleans it again") {
		t.Errorf("records told = %q, want run-1 closed as not returned", got)
	}
	e.reconcile() // no backoff: the device is not faulty
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// What SettleReturns did is told to the reconciler: devices it found
// un-reserved by someone else are counted where the alert
// ScourUnreservedElsewhere looks. Each run it closed no longer counts as
// a clean (a tenant may have used the device while it sat in the pool,
// review M1), so the next scan, a triggered one too, fences such a
// device again, though this process found it held by nobody before (the
// hourly settle: the scan that cached that answer is not the first).
func TestSettledReturnsCountsAndFencesAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.c.Cleaned(rp(1)) // a cleaned run waiting for its un-reserve
	e.reconcile()      // rp-1 un-reserved meanwhile, by someone else: held by nobody, cached
	e.c.UsedAfterClean(rp(1))
	e.r.SettledReturns(claims.Settled{Returned: 1, Closed: 2, Elsewhere: 1})
	e.r.SettledReturns(claims.Settled{})
	if got := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "elsewhere"); got != 1 {
		t.Errorf("unreserves_total{result=elsewhere} = %v, want 1", got)
	}
	e.reconcile()
	if d := e.w.Device(rp(1)); !d.Fenced() {
		t.Fatalf("after the settle closed its run as possibly used, the device is %s (reserved %d/%d): schedulable with data no clean covers", d.State, d.Reserved, d.Total)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A device no profile matches stays no-profile in the devices gauge
// across scans, also at the scan that queues it again when its backoff
// ends: were it counted dirty there, the no-profile series would drop at
// every backoff end and ScourDeviceNotCleanable (for: 15m) would fire
// late, only once the backoff outgrows 15m, and then flap.
func TestNoProfileDeviceStaysNoProfileAcrossScans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) { c.BackoffBase, c.BackoffMax = time.Minute, time.Hour })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	profile := false
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if profile {
			return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: "run-ok"}, nil
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictNoProfile, RunID: "run-np", Detail: "no profile"}, nil
	}
	gauge := func() map[string]float64 {
		t.Helper()
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "scour_lifecycle_devices" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v != 0 {
					out[m.GetLabel()[0].GetValue()] = v
				}
			}
		}
		return out
	}
	want := func(when, state string) {
		t.Helper()
		if g := gauge(); len(g) != 1 || g[state] != 1 {
			t.Errorf("%s: devices gauge %v, want only %s=1", when, g, state)
		}
	}
	e.reconcile() // first run: no profile
	e.reconcile()
	want("backing off", "no-profile")
	for i, wait := range []time.Duration{2 * time.Minute, 3 * time.Minute, 5 * time.Minute} { // past each backoff (1m, 2m, 4m ±20%)
		e.clock.Advance(wait)
		e.reconcile() // the backoff ended: queued and run again, still no profile
		if got := e.cl.CallsFor(rp(1)); got != i+2 {
			t.Fatalf("runs after backoff %d = %d, want %d", i+1, got, i+2)
		}
		want(fmt.Sprintf("scan at the end of backoff %d", i+1), "no-profile")
	}
	profile = true                    // the operator adds a profile
	e.clock.Advance(10 * time.Minute) // past backoff 4 (8m ±20%)
	e.reconcile()                     // cleaned and returned
	e.reconcile()
	want("after a profile matched", "available")
}

// An un-reserve that sent nothing because the run's record was closed
// meanwhile (a retirement racing it) is no Placement failure: no error
// count, no backoff, and the record is left as the closer wrote it.
func TestUnreserveOfAClosedRunIsNoFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) { c.BackoffBase, c.BackoffMax = time.Hour, time.Hour })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		return fmt.Errorf("placement unreserve: %w", claims.ErrNotCleaned)
	}
	e.reconcile()
	if got := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "error"); got != 0 {
		t.Errorf("unreserves_total{result=error} = %v, want 0", got)
	}
	if got := e.cl.NotReturned(); len(got) != 0 {
		t.Errorf("records told %q, want nothing (the closer wrote the record)", got)
	}
	e.reconcile() // not backing off: scanned and run again at once
	if got := e.cl.CallsFor(rp(1)); got != 2 {
		t.Errorf("runs = %d, want 2 (no backoff)", got)
	}
}
