package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// An operator's retire writes the store first, then Placement. When that
// Placement write fails, the next scan sets reserved=total and the
// quarantine trait again, with a WARN naming the device and the reason,
// and never cleans the device; a later scan has nothing left to do.
func TestScanQuarantinesAgainWhatTheStoreHolds(t *testing.T) {
	t.Parallel()
	tests := map[string]func(d *handlers.Device){
		"available when retired":          func(d *handlers.Device) {},
		"dirty when retired":              func(d *handlers.Device) { d.Reserved = 1 },
		"trait kept, un-reserved by hand": func(d *handlers.Device) { d.Quarantined = true },
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, logs := newLoggedEnv(t, 1)
			e.w.Set(rp(1), setup)
			down := true
			e.p.QuarantineF = func(ctx context.Context, d handlers.Device, reason string) error {
				if down {
					return errors.New("placement: 503")
				}
				return e.w.Quarantine(ctx, d, reason)
			}
			// Retire: the store's row, then the Placement write that fails.
			e.c.Retire(rp(1), "retired by alice: RMA")
			if err := e.p.Quarantine(context.Background(), e.w.Device(rp(1)), "retired by alice: RMA"); err == nil {
				t.Fatal("the retire's Placement write did not fail")
			}
			down = false
			e.reconcile()
			d := e.w.Device(rp(1))
			if d.Reserved != d.Total || !d.Quarantined {
				t.Fatalf("after a scan: reserved %d of %d, quarantine trait %v; want reserved and quarantined", d.Reserved, d.Total, d.Quarantined)
			}
			e.wantDevice(1, placement.StateQuarantined, 0, 0)
			out := logs.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "rp=rp-1") || !strings.Contains(out, `reason="retired by alice: RMA"`) {
				t.Errorf("no WARN naming the device and the reason:\n%s", out)
			}
			e.reconcile()
			if got := e.w.Count("quarantine", rp(1)); got != 1 {
				t.Errorf("quarantine writes = %d, want 1 (nothing left to set)", got)
			}
		})
	}
}

// While Placement keeps refusing, the scan says so and the device is not
// cleaned; a device the store does not hold is left alone.
func TestScanQuarantineAgainFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.c.Retire(rp(1), "retired by alice: RMA")
	e.p.QuarantineF = func(context.Context, handlers.Device, string) error { return errors.New("placement: 503") }
	err := e.r.Scan(context.Background(), "test")
	if err == nil || !strings.Contains(err.Error(), "0000:81:00.0") || !strings.Contains(err.Error(), "retried at the next scan") {
		t.Fatalf("Scan = %v; want an error naming the device and the retry", err)
	}
	if got := e.w.Count("quarantine", rp(2)); got != 0 {
		t.Errorf("quarantine writes on a device the store does not hold = %d", got)
	}
}

// An operator's release that lands between the scan's read of the store
// and its read of Placement (store released, then the trait removed) is
// not undone: the store is read again before any Placement write.
func TestScanDoesNotUndoARelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.c.Retire(rp(1), "retired by alice: RMA")
	e.p.ScanHostF = func(ctx context.Context) ([]handlers.Device, error) {
		e.c.Release(rp(1))                                                 // scourctl placement unquarantine: the store,
		e.w.Set(rp(1), func(d *handlers.Device) { d.Quarantined = false }) // then the trait
		return e.w.ScanHost(ctx)
	}
	if err := e.r.Scan(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if got := e.w.Count("quarantine", rp(1)); got != 0 {
		t.Errorf("quarantine writes = %d after the release, want 0", got)
	}
}

// An operator's retirement (scourctl retire, e.g. for an RMA) is planned:
// the devices gauge counts it as retired, so ScourDeviceQuarantined, which
// pages on state="quarantined", is left to cleaning verdicts. A retirement
// Placement lost (dirty, no trait) is counted retired too while the scan
// sets it again.
func TestScanGaugeTellsRetiredFromQuarantined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, nil)
	quarantined := func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true }
	e.w.Set(rp(1), quarantined)
	e.c.Retire(rp(1), "retired by alice: RMA 42")
	e.w.Set(rp(2), quarantined)
	e.c.Quarantine(rp(2), "step sanitize failed: exit 3")
	e.w.Set(rp(3), func(d *handlers.Device) { d.Reserved = 1 })
	e.c.Retire(rp(3), "retired by bob: RMA 43") // Placement lost the trait
	if err := e.r.Scan(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if got := devicesGauge(t, e, "retired"); got != 2 {
		t.Errorf(`scour_lifecycle_devices{state="retired"} = %v, want 2`, got)
	}
	if got := devicesGauge(t, e, "quarantined"); got != 1 {
		t.Errorf(`scour_lifecycle_devices{state="quarantined"} = %v, want 1 (the cleaning verdict only)`, got)
	}
	if d := e.w.Device(rp(3)); d.Reserved != d.Total || !d.Quarantined {
		t.Errorf("lost retirement: reserved %d of %d, trait %v; want set again", d.Reserved, d.Total, d.Quarantined)
	}
}

// Nova's update of a device provider sets its traits to Nova's own set
// (pci_placement_translator update_traits): the quarantine trait goes,
// reserved=total stays (Nova never lowers it). The device is not cleaned
// (the store holds the quarantine); the scan puts the trait back, logs
// it and counts it in scour_lifecycle_quarantines_restored_total, once
// per loss.
func TestNovaTraitReplacementRestoresQuarantine(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 1)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.c.Quarantine(rp(1), "step sanitize failed: exit 3")
	e.reconcile()
	novaUpdate := func(d *handlers.Device) { d.Quarantined = false } // the traits replaced; reserved untouched
	for loss := 1; loss <= 2; loss++ {
		e.w.Set(rp(1), novaUpdate)
		e.reconcile()
		d := e.w.Device(rp(1))
		if d.Reserved != d.Total || !d.Quarantined {
			t.Fatalf("after Nova's update %d and a scan: reserved %d of %d, trait %v; want reserved and quarantined", loss, d.Reserved, d.Total, d.Quarantined)
		}
		want := fmt.Sprintf(`
# HELP scour_lifecycle_quarantines_restored_total Quarantines the store holds that a scan found missing in Placement (the trait or reserved=total lost: Nova replacing the device provider's traits, a failed write, an operator) and set again.
# TYPE scour_lifecycle_quarantines_restored_total counter
scour_lifecycle_quarantines_restored_total %d
`, loss)
		if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "scour_lifecycle_quarantines_restored_total"); err != nil {
			t.Errorf("after %d losses: %v", loss, err)
		}
	}
	if n := e.cl.CallsFor(rp(1)); n != 0 {
		t.Errorf("%d cleaning runs of a quarantined device", n)
	}
	if out := logs.String(); !strings.Contains(out, "setting both again") || !strings.Contains(out, "rp=rp-1") {
		t.Errorf("no WARN naming the device:\n%s", out)
	}
}

// An operator's retirement of a device not cleaned since its last tenant
// waits for its retirement run: never while an instance holds the device
// (rule 2), once when nothing does, with the device kept reserved and
// quarantined (rule 4) and counted retired; once that run's verdict is
// stored, the retirement waits for nothing, and no scan runs it again. A
// retirement that waits for no wipe is never run.
func TestScanRunsARetirementWaitingForItsWipe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined, d.Consumers = 1, true, []string{"vm-1"} })
	e.c.RetireToWipe(rp(1), "retired by alice: RMA")
	e.w.Set(rp(2), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.c.Retire(rp(2), "retired by bob: RMA")
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		e.c.WipeDone(req.Device.RPUUID)
		return handlers.CleanResult{Verdict: pipeline.VerdictQuarantine, RunID: "run-retire", Detail: "retired by alice: RMA; wiped before retirement"}, nil
	}
	e.reconcile()
	if n := e.cl.CallsFor(rp(1)); n != 0 {
		t.Fatalf("retirement run started %d times while vm-1 holds the device", n)
	}
	e.w.Set(rp(1), func(d *handlers.Device) { d.Consumers = nil })
	e.reconcile()
	if n := e.cl.CallsFor(rp(1)); n != 1 {
		t.Fatalf("retirement runs = %d once nothing holds the device, want 1", n)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateQuarantined, 1, 0)
	e.wantDevice(2, placement.StateQuarantined, 0, 0)
	if got := devicesGauge(t, e, "retired"); got != 2 {
		t.Errorf(`scour_lifecycle_devices{state="retired"} = %v, want 2`, got)
	}
}

// tenantT is an instance that gets a device after its retirement.
const tenantT = "00000000-0000-4000-8000-0000000000bb"

// Review rev5 F4: an operator retires an available device (no tenant
// since its last clean: its retirement waits for no wipe), and the
// retirement's Placement write keeps failing, so Nova can still schedule
// it; a tenant gets it and leaves. Whether a scan saw the tenant holding
// the device or only its claim was recorded, the retirement must wait for
// its retirement wipe from then on, and once Placement takes the fence
// and nothing holds the device, its retirement run wipes it: it is never
// retired unwiped holding that tenant's data under a record that says no
// wipe was needed.
func TestRetiredDeviceUsedAfterItsWipeWasDecidedIsWiped(t *testing.T) {
	t.Parallel()
	for _, seen := range []string{"by a scan", "by its claim"} {
		t.Run(seen, func(t *testing.T) {
			t.Parallel()
			e, logs := newLoggedEnv(t, 1)
			e.reconcile()
			down := true
			e.p.QuarantineF = func(ctx context.Context, d handlers.Device, reason string) error {
				if down {
					return errors.New("placement: 503")
				}
				return e.w.Quarantine(ctx, d, reason)
			}
			scan := func() {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = e.r.Scan(ctx, "test") // the quarantine write fails while down
				if err := e.r.WaitIdle(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// scourctl retire: RetireWipe found it free, un-fenced, held by
			// nobody since its last clean: no wipe. The store's row, then
			// the Placement write that fails.
			e.c.Retire(rp(1), "retired by alice: RMA; not wiped: none needed, it holds no tenant's data")
			scan()
			e.w.Allocate(tenantT, false, rp(1)) // Nova schedules it (Cyborg, or Nova before 2025.2: unburned)
			if seen == "by a scan" {
				scan()
			} else {
				e.handle(cmd(command.KindClaim, "instance.create.end", tenantT))
			}
			e.w.Free(tenantT)
			scan()
			open := openQuarantines(t, e)
			if q := open[rp(1)]; !q.Wipe || !strings.Contains(q.Reason, tenantT) {
				t.Errorf("retirement after %s held the device = %+v; want its retirement wipe pending, naming it", tenantT, q)
			}
			e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
				e.c.WipeDone(req.Device.RPUUID)
				return handlers.CleanResult{Verdict: pipeline.VerdictQuarantine, RunID: "run-retire", Detail: "retired by alice: RMA; wiped before retirement"}, nil
			}
			down = false
			e.reconcile() // Placement takes the fence and the trait
			e.reconcile() // the retirement run
			e.reconcile()
			e.wantDevice(1, placement.StateQuarantined, 1, 0)
			if out := logs.String(); !strings.Contains(out, `level=WARN msg="retired device was held by a tenant after its retirement decided no wipe was needed`) ||
				!strings.Contains(out, "instance="+tenantT) {
				t.Errorf("no WARN naming the device's tenant:\n%s", out)
			}
		})
	}
}
