package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// wantUnfencedDuringRun checks what the operator sees of run-1, whose
// device left its fence while it was cleaned: nothing un-reserved, the
// record closed as cleaned, not returned, saying why, a WARN naming the
// device and the run, counted where ScourUnreservedElsewhere looks; and
// the next scan cleans the device with a new run, which returns it.
func wantUnfencedDuringRun(t *testing.T, e *env, logs *testkit.SyncBuffer, why string) {
	t.Helper()
	e.wantDevice(1, placement.StateDirty, 1, 0)
	got := strings.Join(e.cl.NotReturned(), "\n")
	if !strings.HasPrefix(got, "run-1 final=true: ") || !strings.Contains(got, "schedulable while being wiped") || !strings.Contains(got, why) {
		t.Errorf("records told = %q; want run-1 closed as not returned, saying %q", got, why)
	}
	if r := e.cl.Returned(); len(r) != 0 {
		t.Errorf("records closed as returned: %v", r)
	}
	out := logs.String()
	if !strings.Contains(out, `level=WARN msg="device left its fence while being cleaned`) || !strings.Contains(out, "rp=rp-1") ||
		!strings.Contains(out, "run=run-1") || !strings.Contains(out, why) {
		t.Errorf("log:\n%s", out)
	}
	if got, ok := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "elsewhere"),
		metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "ok"); got != 1 || ok != 0 {
		t.Errorf("unreserves{elsewhere} = %v, {ok} = %v; want 1, 0", got, ok)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// Review rev3 H1, layer 1: a run never interrupted is not un-reserved
// once the store saw another tenant hold the device after the run
// started (its fence lifted mid-verify, tenant X scheduled, used and
// deleted, Nova's burn fencing it again): Placement's "nobody holds it
// now" cannot tell, the store can, before any Placement request.
func TestTenantSeenDuringTheRunIsNotReturned(t *testing.T) {
	t.Parallel()
	const why = "Placement showed consumer inst-x holding the device"
	used := map[string]string{"run-1": why + " at 2026-11-22T03:00:00Z, after run run-1 started"}
	e, logs := newLoggedEnv(t, 1)
	e.cl.UsedF = func(runID string) (string, error) { return used[runID], nil }
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.reconcile() // wantUnfencedDuringRun: no un-reserve
	wantUnfencedDuringRun(t, e, logs, why)
}

// Review rev3 M3: another cleaner un-reserves the device while scour
// wipes it, and a scan fences it again (refence). The run must not
// report a normal return: it reports the device un-reserved elsewhere
// (WARN, elsewhere counter, ScourUnreservedElsewhere), not returned, and
// a new run cleans it.
func TestRefenceDuringTheRunReportsElsewhere(t *testing.T) {
	t.Parallel()
	e := heldThenFreed(t)
	logs := &testkit.SyncBuffer{}
	e.logs = logs
	e.build(nil)
	first := true
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if first {
			first = false
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // clean-on-delete.py
			e.scanOnce()                                                // re-fences it
			if d := e.w.Device(rp(1)); !d.Fenced() {
				t.Errorf("device not fenced again mid-run: reserved %d/%d", d.Reserved, d.Total)
			}
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: fmt.Sprint("run-", e.cl.CallsFor(rp(1)))}, nil
	}
	e.reconcile()
	wantUnfencedDuringRun(t, e, logs, "fenced it again (refence)")
}

// Review rev4 M-A: the fence lifted while scour wipes a device whose
// tenant the store never learned (a missed create.end, an allocation no
// scan caught). PreviousTenant says "not held", yet the device is half
// wiped: the scan fences it again because its run is in flight, and the
// run reports it as having left its fence, not as returned.
func TestUnfencedMidRunWithUnknownTenantIsFencedAgain(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	first := true
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if first {
			first = false
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // clean-on-delete.py
			e.scanOnce()
			if d := e.w.Device(rp(1)); !d.Fenced() {
				t.Errorf("device with an unknown tenant not fenced again mid-run: reserved %d/%d", d.Reserved, d.Total)
			}
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: fmt.Sprint("run-", e.cl.CallsFor(rp(1)))}, nil
	}
	e.reconcile()
	wantUnfencedDuringRun(t, e, logs, "fenced it again (refence)")
}

// Review rev5 F2: an operator retires the device while its run still
// cleans it (Store.Retire closes only runs waiting for their return, so
// this one goes on), and the retirement's Placement write fails (a 5xx):
// nothing moved the generation the run's un-reserve PUT is sent at. The
// store refuses to journal that PUT while the retirement is open, so
// nothing is sent: the record is closed as cleaned, not returned, naming
// the retirement, and the next scan sets the trait the retirement could
// not write. No second run starts.
func TestRetiredDuringTheRunIsNotReturned(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		e.c.Retire(rp(1), "retired by alice: RMA 42") // its Placement write then fails
		return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: fmt.Sprint("run-", e.cl.CallsFor(rp(1)))}, nil
	}
	e.reconcile()
	if n, d := e.w.Count("unreserve", rp(1)), e.w.Device(rp(1)); n != 0 || !d.Fenced() {
		t.Fatalf("retired device un-reserved: unreserves=%d reserved=%d/%d", n, d.Reserved, d.Total)
	}
	got := strings.Join(e.cl.NotReturned(), "\n")
	if !strings.HasPrefix(got, "run-1 final=true: ") || !strings.Contains(got, "RMA 42") || !strings.Contains(got, "no un-reserve was sent") {
		t.Errorf("records told = %q; want run-1 closed as not returned, naming the retirement", got)
	}
	if r := e.cl.Returned(); len(r) != 0 {
		t.Errorf("records closed as returned: %v", r)
	}
	out := logs.String()
	if !strings.Contains(out, `level=WARN msg="cleaned device not un-reserved: the claims store holds the device retired or quarantined (retired by alice: RMA 42)`) ||
		!strings.Contains(out, "run=run-1") || strings.Contains(out, "level=ERROR") {
		t.Errorf("log:\n%s", out)
	}
	if q, ok := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "quarantined"),
		metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "ok"); q != 1 || ok != 0 {
		t.Errorf("unreserves{quarantined} = %v, {ok} = %v; want 1, 0", q, ok)
	}
	wantRetiredHeldAfterAScan(t, e)
	e.wantDevice(1, placement.StateQuarantined, 1, 0)
}

// Review rev5 F1, the run's side: its un-reserve PUT lands while an
// operator retires the device, whose Store.Retire closes the run waiting
// for its return. MarkReturned then finds the record closed: that is no
// ERROR saying "the next start settles it" (no settle looks at a closed
// record), but a WARN saying what happened, and a scan, which keeps the
// retired device reserved and quarantined should the retirement's own
// Placement write have failed.
func TestRecordClosedDuringTheUnreserveIsSaidSo(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		err := e.w.Unreserve(ctx, d) // journaled, sent, landed
		e.c.Retire(rp(1), "retired by alice: RMA 42")
		e.cl.CloseRun("run-1", "retired by alice: RMA 42")
		return err
	}
	e.reconcile()
	out := logs.String()
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "settles it") ||
		!strings.Contains(out, `level=WARN msg="device un-reserved, but its run's record was closed while the un-reserve was in flight`) ||
		!strings.Contains(out, "run=run-1") {
		t.Errorf("log:\n%s", out)
	}
	if r := e.cl.Returned(); len(r) != 0 {
		t.Errorf("records closed as returned: %v", r)
	}
	wantRetiredHeldAfterAScan(t, e)
}

// wantRetiredHeldAfterAScan checks that the next scan keeps rp-1, which
// the store holds retired, reserved and quarantined in Placement (set
// again there when the retirement's own Placement write failed).
func wantRetiredHeldAfterAScan(t *testing.T, e *env) {
	t.Helper()
	e.reconcile()
	if d := e.w.Device(rp(1)); !d.Fenced() || !d.Quarantined {
		t.Errorf("retired device after the next scan: reserved %d/%d quarantined=%t; want fenced and quarantined", d.Reserved, d.Total, d.Quarantined)
	}
}

// notReturnedThenBackOff has run-1 clean rp-1 and not return it (its
// un-reserve refused with refusal, or, midRun, a scan fencing it again
// while it ran), then run-2 back off (retry-later), and checks that run-1
// was closed as possibly used after its clean. Later runs clean and
// return the device.
func notReturnedThenBackOff(t *testing.T, e *env, refusal error, midRun bool) {
	t.Helper()
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		if refusal != nil && e.cl.CallsFor(d.RPUUID) == 1 {
			return fmt.Errorf("device %s: %w", d.RPName, refusal)
		}
		return e.w.Unreserve(ctx, d)
	}
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		n := e.cl.CallsFor(rp(1))
		switch {
		case n == 2:
			return handlers.CleanResult{Verdict: pipeline.VerdictRetryLater, RunID: "run-2", Detail: "device busy"}, nil
		case n == 1 && midRun:
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 })
			e.scanOnce() // fences it again
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: fmt.Sprint("run-", n)}, nil
	}
	e.reconcile() // run-1: clean, not returned
	e.reconcile() // run-2: retry-later, backoff
	e.wantDevice(1, placement.StateDirty, 2, 0)
	if got := e.cl.UsedAfterClean(); len(got) != 1 || got[0] != "run-1" {
		t.Errorf("runs closed as possibly used after their clean = %v; want run-1", got)
	}
}

// Review rev5 F3: a run closed as cleaned, not returned, because its
// device may have served a tenant after its clean (a stale return) is no
// clean for that device. Its next run backs off (retry-later); meanwhile
// the fence is lifted (Cyborg's device enable, an inventory set without
// --amend): the scan must fence the device again, not take it for
// available and drop its backoff, and the run that cleans it at last
// names the tenant the stale run cleaned for.
func TestStaleReturnThenLiftedFenceIsFencedAgain(t *testing.T) {
	t.Parallel()
	e := heldThenFreed(t)
	notReturnedThenBackOff(t, e, placement.ErrStaleReturn, false)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // the fence lifted
	e.reconcile()
	if d := e.w.Device(rp(1)); !d.Fenced() {
		t.Fatalf("after a stale return the un-fenced device is %s (reserved %d/%d): schedulable with the data no clean covers", d.State, d.Reserved, d.Total)
	}
	e.clock.Advance(2 * time.Hour) // past run-2's backoff
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 3, 1)
	if calls := e.cl.Calls(); calls[2].PreviousInstance != tenantA {
		t.Errorf("run-3's previous instance = %q; want %s, whom the stale run-1 cleaned for", calls[2].PreviousInstance, tenantA)
	}
}

// Review rev5 F3, with no tenant known (an allocation no scan caught,
// Nova's burn fencing the device): the scan of an available device found
// it held by nobody (cached for triggered scans), then it went dirty.
// Its run is not returned because the device may have served a tenant
// since its clean: a stale return, an allocation at the un-reserve (the
// consumer leaves before any scan), a re-fence mid-run. Its next run
// backs off, the fence is lifted: an unknown tenant stands for the one
// nobody saw, and the scan, a triggered one too, fences the device again.
func TestUsedAfterItsCleanWithUnknownTenantIsFencedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refusal error
		midRun  bool
	}{
		{name: "stale", refusal: placement.ErrStaleReturn},
		{name: "allocated", refusal: placement.ErrAllocated},
		{name: "refenced mid-run", midRun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.reconcile() // available, held by nobody
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
			notReturnedThenBackOff(t, e, tc.refusal, tc.midRun)
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // the fence lifted
			e.reconcile()
			if d := e.w.Device(rp(1)); !d.Fenced() {
				t.Errorf("device un-fenced after run-1 may have served an unseen tenant is %s (reserved %d/%d)", d.State, d.Reserved, d.Total)
			}
		})
	}
}
