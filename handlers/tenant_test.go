package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/placement"
	"strings"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// Regression (issue 16, repro 2): a device allocated with no notification
// (scourd's scan burns it for the new consumer) and then freed was cleaned
// in the name of the instance of the claim before, long gone. The scan
// now records the consumer it sees holding the device, and the cleaning
// names it.
func TestPreviousTenantIsTheConsumerSeenLast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000009", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000009"))
	e.w.Free("00000000-0000-4000-8000-000000000009")
	e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000009"))
	e.reconcile() // cleaned and returned, naming vm-old

	e.w.Allocate("00000000-0000-4000-8000-00000000000c", false, rp(1)) // no notification at all
	e.reconcile()                                                      // the scan burns it for vm-silent
	e.w.Free("00000000-0000-4000-8000-00000000000c")
	e.reconcile()

	calls := e.cl.Calls()
	if len(calls) != 2 || calls[0].PreviousInstance != "00000000-0000-4000-8000-000000000009" || calls[1].PreviousInstance != "00000000-0000-4000-8000-00000000000c" || calls[1].PreviousProject != "" {
		t.Fatalf("clean requests = %+v; want vm-old, then vm-silent with its project unknown", calls)
	}
	e.wantDevice(1, placement.StateAvailable, 2, 2)
}

// A failed un-reserve keeps the record open, saying why; an allocation
// found at the un-reserve closes it as cleaned, not returned.
func TestNotReturnedIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	for i := 1; i <= 2; i++ {
		e.w.Allocate("vm", true, rp(i))
	}
	e.w.Free("vm")
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		if d.RPUUID == rp(1) {
			return errors.New("placement 503")
		}
		return placement.ErrAllocated
	}
	e.reconcile()
	got := strings.Join(e.cl.NotReturned(), "\n")
	if !strings.Contains(got, "final=false: the un-reserve failed (placement 503)") || !strings.Contains(got, "final=true: Placement showed an allocation") {
		t.Fatalf("not-returned notes:\n%s", got)
	}
	if r := e.cl.Returned(); len(r) != 0 {
		t.Fatalf("returned records %v without an un-reserve", r)
	}
}

// A device retired while its un-reserve was pending: the refusal closes
// the record as cleaned, not returned (so the release starts a new run
// instead of resuming this one into an un-reserve), is counted apart from
// errors and does not back off; once released, the next scan cleans it.
func TestQuarantinedAtUnreserveClosesTheRecord(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		e.w.Set(rp(1), func(d *handlers.Device) { d.Quarantined = true }) // scourctl retire
		return fmt.Errorf("placement unreserve of device %s: %w", d.RPName, placement.ErrQuarantined)
	}
	e.reconcile()
	got := strings.Join(e.cl.NotReturned(), "\n")
	if !strings.Contains(got, "run-1 final=true: Placement showed the device quarantined at the un-reserve") {
		t.Fatalf("not-returned notes:\n%s", got)
	}
	if out := logs.String(); strings.Contains(out, "retried after a backoff") || !strings.Contains(out, "cleaned device is quarantined now") {
		t.Errorf("log:\n%s", out)
	}
	if q, errs := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "quarantined"),
		metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "error"); q != 1 || errs != 0 {
		t.Errorf("unreserves{quarantined} = %v, {error} = %v; want 1, 0", q, errs)
	}
	e.p.UnreserveF = nil
	e.w.Set(rp(1), func(d *handlers.Device) { d.Quarantined = false }) // scourctl placement unquarantine
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// A device someone else un-reserved while scour cleaned it is not
// reported returned: a WARN names the device and the run, the record says
// it was not un-reserved by scour, and the metric counts it apart. It was
// schedulable while being wiped, and a tenant may have come and gone on
// it unseen (no scan ran during the run to fence it again): the run is
// closed as possibly used after its clean (review M1), so the scan that
// follows fences it again, though the re-fence cache said "not held"
// before the run, and a new run cleans it before it returns.
func TestUnreservedElsewhereIsToldTruthfully(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.reconcile() // available, held by nobody: cached for triggered scans
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // Nova's clean-on-delete sample
		return fmt.Errorf("placement unreserve of device %s: %w", d.RPName, placement.ErrUnreservedElsewhere)
	}
	e.reconcile()
	got := strings.Join(e.cl.NotReturned(), "\n")
	if !strings.Contains(got, "run-1 final=true: every required step succeeded, but the device was un-reserved in Placement by someone else during cleaning, not by scour") {
		t.Fatalf("not-returned notes:\n%s", got)
	}
	if r := e.cl.Returned(); len(r) != 0 {
		t.Errorf("records closed as returned by scour: %v", r)
	}
	if u := e.cl.UsedAfterClean(); len(u) != 1 || u[0] != "run-1" {
		t.Errorf("runs closed as possibly used after their clean = %v; want run-1: a tenant may have used the device since it left its fence", u)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN msg=\"device un-reserved by someone else during cleaning: check for another cleaner, e.g. Nova's clean-on-delete sample") ||
		!strings.Contains(out, "rp=rp-1") || !strings.Contains(out, "run=run-1") || strings.Contains(out, "returned to the pool\"") {
		t.Errorf("log:\n%s", out)
	}
	if got, ok := metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "elsewhere"),
		metricValue(t, e, "scour_lifecycle_unreserves_total", "result", "ok"); got != 1 || ok != 0 {
		t.Errorf("unreserves{elsewhere} = %v, {ok} = %v; want 1, 0", got, ok)
	}
	e.p.UnreserveF = nil
	e.reconcile() // a triggered scan: the cache must not answer for rp-1
	if d := e.w.Device(rp(1)); !d.Fenced() {
		t.Fatalf("after the scan the device un-reserved elsewhere is %s (reserved %d/%d): schedulable with data no clean covers", d.State, d.Reserved, d.Total)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// Issue 31 item 11: during a resize, Nova moves the source allocation to
// the migration's uuid, and a scan then sees the migration holding the
// source device. Its cleaning after the confirm names the instance of the
// store's claim, with its project, not the migration consumer (project
// unknown): Placement says the consumer is a MIGRATION, the store's live
// claim on the device says whose.
func TestMoveSourceRecordNamesTheInstanceNotTheMigration(t *testing.T) {
	t.Parallel()
	const inst = "00000000-0000-4000-8000-000000000001"
	e := newEnv(t, 1, nil)
	e.w.Allocate(inst, true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", inst))
	e.reconcile()
	e.w.Move(inst, "mig-1", rp(1))
	e.reconcile() // sees the migration holding the device
	e.w.Free("mig-1")
	cf := cmd(command.KindMoveSource, "instance.resize_confirm.end", inst)
	cf.Scope, cf.Host = command.ScopeBroadcast, ""
	e.handle(cf)
	e.reconcile()
	calls := e.cl.Calls()
	if len(calls) != 1 || calls[0].PreviousInstance != inst || calls[0].PreviousProject != "project-a" {
		t.Fatalf("clean requests = %+v; want one naming instance %s of project-a", calls, inst)
	}
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A consumer Placement does not call a migration, seen while another
// instance's claim is live, is named as itself (repro 2 of issue 16 stays).
func TestNonMigrationConsumerIsNotMappedToTheClaim(t *testing.T) {
	t.Parallel()
	const inst, other = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-00000000000c"
	e := newEnv(t, 1, nil)
	e.w.Allocate(inst, true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", inst))
	e.reconcile()
	e.w.Free(inst)
	e.w.Allocate(other, false, rp(1))
	e.reconcile()
	e.w.Free(other)
	e.reconcile()
	calls := e.cl.Calls()
	if len(calls) != 1 || calls[0].PreviousInstance != other {
		t.Fatalf("clean requests = %+v; want one naming %s", calls, other)
	}
}
