package handlers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/scour-project/scour/placement"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// cyborgEnv is a host whose rp-1 is a Cyborg FPGA deployable of 4 units,
// with a store that knows each clean verdict.
func cyborgEnv(t *testing.T) *env {
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Cyborg, d.ResourceClass, d.Total = true, "FPGA", 4 })
	e.cl.OnClean = e.c.Cleaned
	return e
}

const cyborgTenant = "00000000-0000-4000-8000-0000000000c1"

// Bind fences the whole card (Nova does not burn Cyborg devices: scour's
// claim does); release cleans it; the return gives back every unit.
func TestCyborgBindFencesReleaseCleansReturnsAll(t *testing.T) {
	t.Parallel()
	e := cyborgEnv(t)
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	if d := e.w.Device(rp(1)); d.Reserved != 4 {
		t.Fatalf("after the bind: reserved %d of 4, want the whole card fenced", d.Reserved)
	}
	e.w.Free(cyborgTenant)
	e.handle(cmd(command.KindRelease, "instance.delete.end", cyborgTenant))
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	if d := e.w.Device(rp(1)); d.Reserved != 0 {
		t.Fatalf("after the return: reserved %d, want 0 (every unit back at once)", d.Reserved)
	}
	e.reconcile() // cleaned since its last tenant: no re-fence
	if got := e.w.Count("refence", rp(1)); got != 0 {
		t.Fatalf("a cleaned, returned card was fenced again %d times", got)
	}
}

// The fence lifted (Cyborg's enable, or the conductor's inventory
// rewrite: both leave reserved 0) while the freed card is still dirty:
// the next scan fences it again, counts it, and the card is cleaned
// before any unit returns. Without the re-fence the card would stay
// schedulable uncleaned (the test fails: no clean, reserved 0).
func TestCyborgFenceLiftedWhileDirtyIsRefenced(t *testing.T) {
	t.Parallel()
	for _, undo := range []struct {
		name string
		res  int
	}{{"device enable", 0}, {"conductor rewrite after num_accelerators changed", 0}, {"partial", 2}} {
		t.Run(undo.name, func(t *testing.T) {
			t.Parallel()
			e := cyborgEnv(t)
			e.w.Allocate(cyborgTenant, false, rp(1))
			e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
			e.w.Free(cyborgTenant)
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = undo.res }) // the fence lifted
			e.reconcile()
			if got := e.w.Count("refence", rp(1)); got != 1 {
				t.Fatalf("re-fences = %d, want 1", got)
			}
			if d := e.w.Device(rp(1)); d.Reserved != 4 && e.cl.CallsFor(rp(1)) == 0 {
				t.Fatalf("after the scan: reserved %d and not cleaned: the dirty card is schedulable", d.Reserved)
			}
			e.reconcile()
			e.wantDevice(1, placement.StateAvailable, 1, 1)
			if got := metricValue(t, e, "scour_lifecycle_refences_total", "result", "ok"); got != 1 {
				t.Errorf("scour_lifecycle_refences_total{result=ok} = %v, want 1", got)
			}
		})
	}
}

// Lifted while the tenant still holds a unit: the scan burns it again.
func TestCyborgFenceLiftedInUseIsBurnedAgain(t *testing.T) {
	t.Parallel()
	e := cyborgEnv(t)
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 })
	e.reconcile()
	if d := e.w.Device(rp(1)); d.Reserved != 4 {
		t.Fatalf("in use, fence lifted, after a scan: reserved %d, want 4", d.Reserved)
	}
	e.wantDevice(1, placement.StateBurnedInUse, 0, 0)
}

// Operations after which Nova keeps the instance's accelerators reach the
// handler only as a rebuild (pause, suspend, lock and reboot are not
// routed at all: notification tests): a rebuild of a bound instance
// writes nothing and cleans nothing.
func TestCyborgRebuildKeepsTheCard(t *testing.T) {
	t.Parallel()
	e := cyborgEnv(t)
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	e.handle(cmd(command.KindClaim, "instance.rebuild.end", cyborgTenant))
	e.reconcile()
	if got := e.w.Count("burn", rp(1)); got != 1 {
		t.Errorf("burns = %d, want 1 (the bind only)", got)
	}
	e.wantDevice(1, placement.StateBurnedInUse, 0, 0)
}

// Shelve offload releases the accelerators: the card is cleaned and
// returned.
func TestCyborgShelveOffloadCleans(t *testing.T) {
	t.Parallel()
	e := cyborgEnv(t)
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	e.w.Free(cyborgTenant)
	e.handle(cmd(command.KindShelveOffload, "instance.shelve_offload.end", cyborgTenant))
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// Review rev5 F6: the claim command loses the race with the delete.
// Nova does not burn a Cyborg card; the claim reads the instance's
// allocations (it holds the card, un-fenced), then the instance is
// deleted and its delete handled (the scan it triggers finds the card
// free, un-fenced, held by nobody known), before the claim's read of the
// tombstone or after it, when its burn finds nothing to burn. Placement's
// read showed the instance holding the card: that is recorded, so the
// scan fences the card again and cleans it (its record naming the
// instance) rather than leave it in the pool uncleaned.
func TestClaimThatLosesTheRaceWithTheDeleteRecordsTheHolder(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before the tombstone read", "before the burn"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			e := cyborgEnv(t)
			e.w.Allocate(cyborgTenant, false, rp(1))
			deleted := false
			del := func() {
				deleted = true
				e.w.Free(cyborgTenant) // Nova drops its allocations
				e.handle(cmd(command.KindRelease, "instance.delete.end", cyborgTenant))
				e.reconcile() // the delete's scan: free, un-fenced, no tenant known
			}
			e.p.InstanceAllocationsF = func(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
				a, err := e.w.InstanceAllocations(ctx, instance)
				if when == "before the tombstone read" && !deleted {
					del() // after the claim's read
				}
				return a, err
			}
			e.p.BurnF = func(ctx context.Context, d handlers.Device) error {
				if when == "before the burn" && !deleted {
					del()
				}
				if !e.w.Device(d.RPUUID).InUse() {
					return fmt.Errorf("device %s: %w", d.RPName, placement.ErrNotAllocated)
				}
				return e.w.Burn(ctx, d)
			}
			e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
			if !deleted {
				t.Fatal("the delete did not race the claim")
			}
			if _, ok := e.c.ForDevice(cyborgTenant, rp(1)); ok {
				t.Fatalf("a claim recorded for an instance deleted before its burn")
			}
			e.reconcile() // fences the card again
			if d := e.w.Device(rp(1)); !d.Fenced() {
				t.Fatalf("after the scan the card the deleted instance held is %s, reserved %d of 4: in the pool uncleaned", d.State, d.Reserved)
			}
			e.reconcile()
			e.wantDevice(1, placement.StateAvailable, 1, 1)
			if calls := e.cl.Calls(); len(calls) != 1 || calls[0].PreviousInstance != cyborgTenant {
				t.Errorf("cleaning runs %+v; want one naming %s", calls, cyborgTenant)
			}
		})
	}
}
