package handlers_test

import (
	"context"
	"github.com/scour-project/scour/placement"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// Instance and migration consumer UUIDs (commands carry UUIDs only).
const (
	vmA  = "0a000000-0000-4000-8000-00000000000a"
	vmB  = "0b000000-0000-4000-8000-00000000000b"
	mig1 = "0c000000-0000-4000-8000-00000000000c"
	vmR  = "0d000000-0000-4000-8000-00000000000d"
)

// A claims store lost with the host's devices still allocated (a fresh
// database): the first scan rebuilds each instance's claim from
// Placement, so the release cleans at once and the records name the
// instance and its project. A migration consumer gets no claim.
func TestClaimsRebuiltFromPlacement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Hour)
		c.ReconcileInterval = time.Hour
	})
	e.w.Allocate(vmA, true, rp(1), rp(2))
	e.w.Allocate(vmB, true, rp(3))
	e.w.Move(vmB, mig1, rp(3)) // a resize waiting for confirm
	var reads atomic.Int64
	e.p.InstanceAllocationsF = func(ctx context.Context, inst string) (handlers.InstanceAllocation, error) {
		reads.Add(1)
		a, err := e.w.InstanceAllocations(ctx, inst)
		a.ProjectID, a.UserID = "proj-"+inst, "user-"+inst
		return a, err
	}
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.claimState(vmA, 2) == handlers.ClaimActive })
	if got := e.claimState(vmA, 1); got != handlers.ClaimActive {
		t.Errorf("vm-a claim on %s = %q, want active (rebuilt)", rp(1), got)
	}
	if got := e.claimState(mig1, 3); got != "" {
		t.Errorf("migration consumer got a claim: %q", got)
	}
	if got := reads.Load(); got != 2 {
		t.Errorf("Placement allocation reads = %d, want 2 (vm-a, mig-1)", got)
	}

	e.w.Free(vmA)
	e.handle(cmd(command.KindRelease, "instance.delete.end", vmA))
	waitFor(t, func() bool {
		return e.state(1) == placement.StateAvailable && e.state(2) == placement.StateAvailable
	})
	if got := e.w.Count("scan", ""); got != 1 {
		t.Errorf("scans = %d, want 1: the rebuilt claim sends the release straight to its devices", got)
	}
	calls := e.cl.Calls()
	if len(calls) != 2 {
		t.Fatalf("clean requests = %+v, want rp-1 and rp-2", calls)
	}
	for _, c := range calls {
		if c.PreviousInstance != vmA || c.PreviousProject != "proj-"+vmA {
			t.Errorf("clean of %s names %s/%s, want vm-a/proj-vm-a", c.Device.RPName, c.PreviousInstance, c.PreviousProject)
		}
	}
}

// An instance with a live claim here is left to the notifications: the
// scan records the holder but rebuilds nothing (same-host resize).
func TestRebuildLeavesKnownInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Allocate(vmR, true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", vmR))
	e.w.Allocate(vmR, true, rp(2)) // the new side of a resize, not yet notified
	reads := 0
	e.p.InstanceAllocationsF = func(ctx context.Context, inst string) (handlers.InstanceAllocation, error) {
		reads++
		return e.w.InstanceAllocations(ctx, inst)
	}
	e.reconcile()
	if reads != 0 {
		t.Errorf("allocation reads = %d for an instance with a live claim, want 0", reads)
	}
	if c, ok := e.c.ForDevice(vmR, rp(2)); ok {
		t.Errorf("claim %+v gained the resize target's device from a scan", c)
	}
}
