package handlers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

const tenantA = "00000000-0000-4000-8000-0000000000aa"

// heldThenFreed is a host whose rp-1 instance A held (a claim, a scan
// saw it) and freed, with no release handled and no scan since: dirty,
// its clean pending.
func heldThenFreed(t *testing.T) *env {
	e := newEnv(t, 1, nil)
	e.w.Allocate(tenantA, true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", tenantA))
	e.reconcile()
	e.w.Free(tenantA)
	return e
}

// scanOnce runs one scan without waiting for the cleans it queues.
func (e *env) scanOnce() {
	e.t.Helper()
	if err := e.r.Scan(context.Background(), "test"); err != nil {
		e.t.Fatal(err)
	}
}

func openQuarantines(t *testing.T, e *env) map[string]handlers.OpenQuarantine {
	t.Helper()
	open, err := e.c.OpenQuarantines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return open
}

// A quarantined device whose provider Nova re-creates (same name and PCI
// address, a new UUID, reserved 0, Nova's traits only) is quarantined
// again within one scan, and its quarantine moves to the new provider in
// the store (scourctl placement unquarantine reaches it), counted once.
// Without the fix it stays in the pool uncleaned.
func TestQuarantineFollowsRecreatedProvider(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.c.Quarantine(rp(1), "verification failed: media still holds data")
	e.reconcile()
	if d := e.w.Device(rp(1)); d.Reserved != 1 || !d.Quarantined {
		t.Fatalf("setup: %+v", d)
	}
	e.w.Recreate(rp(1), "rp-1-new")
	e.reconcile()
	d := e.w.Device("rp-1-new")
	if d.Reserved != d.Total || !d.Quarantined {
		t.Fatalf("device %s (quarantined in the store as %s) after its provider was re-created: reserved %d/%d, trait %v, state %s: back in the pool uncleaned",
			d.Address, rp(1), d.Reserved, d.Total, d.Quarantined, d.State)
	}
	open := openQuarantines(t, e)
	if q, ok := open["rp-1-new"]; !ok || !strings.Contains(q.Reason, "media still holds data") || len(open) != 1 {
		t.Fatalf("store's open quarantines after the re-creation: %+v; want the verdict moved to rp-1-new", open)
	}
	e.reconcile()
	if got := metricValue(t, e, "scour_lifecycle_providers_recreated_total", "knowledge", "quarantine"); got != 1 {
		t.Errorf("providers_recreated_total{knowledge=quarantine} = %v, want 1", got)
	}
	if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", "quarantined"); got != 0 {
		t.Errorf("quarantines_orphaned = %v, want 0", got)
	}
	if n := e.cl.CallsFor("rp-1-new"); n != 0 {
		t.Errorf("the quarantined device was cleaned %d times; a quarantine waits for an operator", n)
	}
}

// The same for a device that held a tenant's data and was not yet
// cleaned (released while scourd was down, its clean pending): fenced
// again within one scan, then cleaned with the tenant named. Without the
// fix it is left available with instance A's data.
func TestDirtyDeviceFollowsRecreatedProvider(t *testing.T) {
	t.Parallel()
	e := heldThenFreed(t)
	// scourd down: no delete handled, no scan. Nova re-creates the RP.
	e.w.Recreate(rp(1), "rp-1-new")
	e.scanOnce()
	if d := e.w.Device("rp-1-new"); d.Reserved != d.Total {
		t.Fatalf("device %s held instance A's data, never cleaned; after its provider was re-created: reserved %d/%d, state %s: in the pool uncleaned",
			d.Address, d.Reserved, d.Total, d.State)
	}
	e.reconcile()
	e.reconcile()
	calls := e.cl.Calls()
	if len(calls) == 0 || calls[0].Device.RPUUID != "rp-1-new" || calls[0].PreviousInstance != tenantA {
		t.Fatalf("clean requests %+v; want rp-1-new cleaned, naming instance A", calls)
	}
	if d := e.w.Device("rp-1-new"); d.State != placement.StateAvailable || e.cl.CallsFor("rp-1-new") != 1 || e.w.Count("unreserve", "rp-1-new") != 1 {
		t.Errorf("rp-1-new: state %s, %d cleans, %d un-reserves; want available after one clean and one un-reserve",
			d.State, e.cl.CallsFor("rp-1-new"), e.w.Count("unreserve", "rp-1-new"))
	}
	if got := metricValue(t, e, "scour_lifecycle_providers_recreated_total", "knowledge", "tenant"); got != 1 {
		t.Errorf("providers_recreated_total{knowledge=tenant} = %v, want 1 (cleaned since: no second count)", got)
	}
}

// A Nova device whose reserved someone lowered (openstack resource
// provider inventory set without --amend) while its last tenant's data
// is still on it is fenced again, as a Cyborg device is. Without the fix
// only Cyborg devices are.
func TestNovaDeviceUnfencedBeforeItsCleanIsRefenced(t *testing.T) {
	t.Parallel()
	e := heldThenFreed(t)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 })
	e.scanOnce()
	if d := e.w.Device(rp(1)); d.Reserved != d.Total {
		t.Fatalf("un-reserved device with instance A's data: reserved %d/%d, state %s: in the pool uncleaned", d.Reserved, d.Total, d.State)
	}
	if got := metricValue(t, e, "scour_lifecycle_refences_total", "result", "ok"); got != 1 {
		t.Errorf("refences_total{result=ok} = %v, want 1", got)
	}
}

// An open quarantine whose provider left the tree, with no provider at
// its address, is counted in quarantines_orphaned; when a provider comes
// back at its address, the quarantine moves to it and is set again.
func TestOrphanedQuarantineReportedThenReattached(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.c.Quarantine(rp(1), "sanitize failed")
	e.reconcile()
	addr := e.w.Device(rp(1)).Address
	e.w.Recreate(rp(1), "rp-1-new")
	e.w.Set("rp-1-new", func(d *handlers.Device) { d.Address = "0000:99:00.0" }) // not at the address yet
	e.reconcile()
	if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", "quarantined"); got != 1 {
		t.Fatalf("quarantines_orphaned = %v with rp-1 out of the tree, want 1", got)
	}
	if _, ok := openQuarantines(t, e)[rp(1)]; !ok {
		t.Fatal("the orphaned quarantine was dropped")
	}
	if d := e.w.Device("rp-1-new"); d.Quarantined {
		t.Fatal("a provider at another address was quarantined")
	}
	e.w.Set("rp-1-new", func(d *handlers.Device) { d.Address = addr })
	e.reconcile()
	if d := e.w.Device("rp-1-new"); d.Reserved != d.Total || !d.Quarantined {
		t.Fatalf("provider back at the quarantined address: reserved %d/%d, trait %v", d.Reserved, d.Total, d.Quarantined)
	}
	if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", "quarantined"); got != 0 {
		t.Errorf("quarantines_orphaned = %v after the re-attach, want 0", got)
	}
}

// The RMA steps: a retired device removed from [pci] device_spec (Nova
// deletes its provider) leaves an orphaned retirement, counted under
// state="retired", which is not alerted on, never under "quarantined",
// which is; its WARN names the command that closes it. A replacement card
// at the same address is kept out of the pool by the retirement (the
// fail-safe side: scour cannot tell the cards apart) and not cleaned; the
// WARN names the command that releases it. Without the label, both kinds
// count in one series that pages.
func TestRetirementOrphanedByRMAIsNotAQuarantine(t *testing.T) {
	t.Parallel()
	e, logs := newLoggedEnv(t, 2)
	addr := e.w.Device(rp(1)).Address
	e.c.Retire(rp(1), "RMA 42") // scourctl retire: the store, then Placement
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
	e.reconcile()
	e.w.Remove(rp(1)) // out of [pci] device_spec: Nova deletes the provider
	e.reconcile()
	if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", "retired"); got != 1 {
		t.Errorf(`quarantines_orphaned{state="retired"} = %v with the retired device's provider gone, want 1`, got)
	}
	if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", "quarantined"); got != 0 {
		t.Errorf(`quarantines_orphaned{state="quarantined"} = %v for a retirement, want 0 (it pages)`, got)
	}
	if !strings.Contains(logs.String(), "scourctl placement unquarantine --rp RP") {
		t.Errorf("the orphaned retirement's WARN does not name the command that closes it:\n%s", logs.String())
	}
	// The replacement card lands at the same address.
	e.w.AddDevice("rp-1-replacement", addr)
	e.reconcile()
	d := e.w.Device("rp-1-replacement")
	if d.Reserved != d.Total || !d.Quarantined {
		t.Fatalf("replacement card at the retired address: reserved %d/%d, trait %v; want it kept out until the operator releases it", d.Reserved, d.Total, d.Quarantined)
	}
	if q, ok := openQuarantines(t, e)["rp-1-replacement"]; !ok || !q.Retired {
		t.Fatalf("open quarantines %+v; want the retirement moved to the replacement's provider", openQuarantines(t, e))
	}
	if n := e.cl.CallsFor("rp-1-replacement"); n != 0 {
		t.Errorf("the retired address was cleaned %d times; a retirement waits for the operator", n)
	}
	for _, st := range []string{"retired", "quarantined"} {
		if got := metricValue(t, e, "scour_lifecycle_quarantines_orphaned", "state", st); got != 0 {
			t.Errorf(`quarantines_orphaned{state=%q} = %v once a provider is at the address, want 0`, st, got)
		}
	}
	e.reconcile() // the scan after the quarantine was set again counts it
	if got := devicesGauge(t, e, "retired"); got != 1 {
		t.Errorf(`devices{state="retired"} = %v, want 1`, got)
	}
	if want := "scourctl placement unquarantine " + string(addr); !strings.Contains(logs.String(), want) {
		t.Errorf("the WARN of a retirement moved to a new provider does not say %q:\n%s", want, logs.String())
	}
}
