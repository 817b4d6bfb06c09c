package handlers_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

const racedVM = "00000000-0000-4000-8000-000000000033"

// deleteNow plays Nova deleting racedVM and scour handling its delete.end,
// while the create.end is still being handled.
func (e *env) deleteNow() {
	e.t.Helper()
	e.w.Free(racedVM)
	e.handle(cmd(command.KindRelease, "instance.delete.end", racedVM))
}

func (e *env) wantNoLiveClaim() {
	e.t.Helper()
	for _, c := range e.c.All() {
		if c.Live() {
			e.t.Errorf("claim %s of instance %s is %s after its delete was handled, want none live", c.ID, c.InstanceUUID, c.State)
		}
	}
}

// The delete is handled after the create.end read the instance's
// allocations (a 64-device instance is still being handled): the claim
// command finds the tombstone and records nothing; the device Nova burned
// is cleaned and returned once.
func TestDeleteHandledWhileClaimReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Allocate(racedVM, true, rp(1), rp(2))
	e.p.InstanceAllocationsF = func(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
		alloc, err := e.w.InstanceAllocations(ctx, instance)
		if instance == racedVM && len(alloc.Devices) > 0 {
			e.p.InstanceAllocationsF = nil
			e.deleteNow()
		}
		return alloc, err
	}
	e.handle(cmd(command.KindClaim, "instance.create.end", racedVM))
	e.wantNoLiveClaim()
	if n := len(e.c.All()); n != 0 {
		t.Errorf("claims = %d, want none recorded for a deleted instance", n)
	}
	if got := metricValue(t, e, "scour_lifecycle_tombstones_read_total", "result", "stood"); got != 1 {
		t.Errorf("tombstone reads that stood = %v, want 1", got)
	}
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	e.wantDevice(2, placement.StateAvailable, 1, 1)
}

// The delete is handled between the claim command's tombstone read and
// its claim write (it reads no claim): the claim command reads the
// tombstone again after writing, releases its claim, and the device it
// burned itself (Nova did not) is cleaned and returned, not left
// reserved.
func TestDeleteHandledWhileClaimWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate(racedVM, false, rp(1))
	var raced atomic.Bool
	e.c.Fail = func(op string) error {
		if op == "RecordClaim" && raced.CompareAndSwap(false, true) {
			e.deleteNow()
		}
		return nil
	}
	e.handle(cmd(command.KindClaim, "instance.create.end", racedVM))
	if got := e.w.Count("burn", rp(1)); got != 1 {
		t.Fatalf("burns = %d, want 1 (Nova left the device unburned)", got)
	}
	e.wantNoLiveClaim()
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A scourd that stops after writing the claim and before reading the
// tombstone (rule 5): the create.end is delivered again to the restarted
// scourd, which finds the instance holding nothing, reads the tombstone
// anyway, and ends the claim; the device is cleaned and returned.
func TestDeletedClaimEndedAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate(racedVM, true, rp(1))
	var deletedReads, raced atomic.Int32
	e.c.Fail = func(op string) error {
		switch {
		case op == "RecordClaim" && raced.Add(1) == 1:
			e.deleteNow()
		case op == "Deleted" && deletedReads.Add(1) == 2: // the read after the claim write
			return errors.New("scourd stopped")
		}
		return nil
	}
	create := cmd(command.KindClaim, "instance.create.end", racedVM)
	if err := e.h.Handle(context.Background(), create); err == nil {
		t.Fatal("create.end succeeded although the tombstone read after the claim write failed")
	}
	if live := e.claimState(racedVM, 1); live != handlers.ClaimActive {
		t.Fatalf("claim = %q before the restart, want active (written before the stop)", live)
	}
	e.build(nil) // restarted over the same store
	e.handle(create)
	e.wantNoLiveClaim()
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A delete of an instance that still holds its devices here (early,
// duplicate or forged) leaves no tombstone: the next claim command of
// the instance (a rebuild) is recorded.
func TestDeleteOfRunningInstanceLeavesNoTombstone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate(racedVM, true, rp(1))
	e.handle(cmd(command.KindRelease, "instance.delete.end", racedVM))
	if gone, _ := e.c.Deleted(context.Background(), racedVM); gone {
		t.Error("delete of an instance still holding its device left a tombstone")
	}
	e.handle(cmd(command.KindClaim, "instance.rebuild.end", racedVM))
	if got := e.claimState(racedVM, 1); got != handlers.ClaimActive {
		t.Errorf("claim = %q, want active", got)
	}
}

// tombstoneOnce returns a hook that writes racedVM's tombstone the first
// time it runs, after freeing the instance's allocations when free (Nova's
// real delete), and whether it ran.
func (e *env) tombstoneOnce(free bool) (func(), *atomic.Bool) {
	raced := &atomic.Bool{}
	return func() {
		if !raced.CompareAndSwap(false, true) {
			return
		}
		if free {
			e.w.Free(racedVM)
		}
		if err := e.c.NoteDeleted(context.Background(), racedVM, "msg-delete"); err != nil {
			e.t.Error(err)
		}
	}, raced
}

// The reconciler rebuilding a claim for a consumer it saw holding a
// device (rebuild.go) records none for an instance whose delete was
// handled: the scan read the device, then Nova deleted the instance's
// allocations and the delete was handled while the claim was rebuilt
// (after its allocations read, and after its claim write).
func TestNoClaimRebuiltForDeletedInstance(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"InstanceAllocations", "RecordClaim"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.w.Allocate(racedVM, true, rp(1))
			deleteNow, raced := e.tombstoneOnce(true)
			e.p.InstanceAllocationsF = func(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
				alloc, err := e.w.InstanceAllocations(ctx, instance)
				if at == "InstanceAllocations" && instance == racedVM && len(alloc.Devices) > 0 {
					deleteNow()
				}
				return alloc, err
			}
			e.c.Fail = func(op string) error {
				if at == "RecordClaim" && op == "RecordClaim" {
					deleteNow()
				}
				return nil
			}
			e.reconcile()
			if !raced.Load() {
				t.Fatalf("the delete never raced the rebuild at %s", at)
			}
			e.wantNoLiveClaim()
		})
	}
}

// forgeDelete plays a forged or misrouted delete.end of racedVM reaching
// this host while the instance lives elsewhere (it holds nothing here): it
// leaves a tombstone.
func (e *env) forgeDelete() {
	e.t.Helper()
	e.handle(cmd(command.KindRelease, "instance.delete.end", racedVM))
	if gone, err := e.c.Deleted(context.Background(), racedVM); err != nil || !gone {
		e.t.Fatalf("forged delete left no tombstone (gone %v, err %v); the test needs one", gone, err)
	}
}

// A forged delete.end of an instance living on another host, then the
// instance migrates here with a device Nova (before 2025.2) left
// unburned: the tombstone does not suppress the claim while Placement
// shows the instance holding the device, so the device is burned and the
// claim recorded (rules 1 and 3); its later real delete cleans it.
func TestForgedDeleteDoesNotSkipBurnOnMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.forgeDelete()
	e.w.Allocate(racedVM, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.live_migration_post_dest.end", racedVM))
	if got := e.w.Count("burn", rp(1)); got != 1 {
		t.Errorf("burns = %d, want 1: the migrated instance's device must be fenced despite the forged tombstone", got)
	}
	if got := metricValue(t, e, "scour_lifecycle_tombstones_read_total", "result", "contradicted"); got != 2 {
		t.Errorf("contradicted tombstone reads = %v, want 2 (before and after the claim write; an operator alerts on it)", got)
	}
	if got := e.claimState(racedVM, 1); got != handlers.ClaimActive {
		t.Fatalf("claim = %q, want active (Placement shows the instance holding the device)", got)
	}
	e.w.Free(racedVM)
	e.handle(cmd(command.KindRelease, "instance.delete.end", racedVM))
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// The same for a claim the reconciler rebuilds from Placement: a forged
// tombstone does not keep the instance that Placement shows holding a
// device of this host from getting its claim.
func TestForgedDeleteDoesNotSkipRebuiltClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.forgeDelete()
	e.w.Allocate(racedVM, false, rp(1))
	e.reconcile()
	if got := e.claimState(racedVM, 1); got != handlers.ClaimActive {
		t.Errorf("claim = %q, want active (rebuilt: Placement shows the instance holding the device)", got)
	}
	if got := e.w.Count("burn", rp(1)); got != 1 {
		t.Errorf("burns = %d, want 1 (the scan fences the device Nova left unburned)", got)
	}
}

// A tombstone that appears while the claim is written (a stale one read
// late, or one forged by any other path) ends the just-written claim only
// when Placement no longer shows the instance's devices: here it still
// does, so the claim command's and the rebuild's claims are kept.
func TestTombstoneAfterClaimWriteKeepsHeldClaim(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"create.end", "rebuild"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.w.Allocate(racedVM, false, rp(1))
			tombstone, raced := e.tombstoneOnce(false)
			e.c.Fail = func(op string) error {
				if op == "RecordClaim" {
					tombstone()
				}
				return nil
			}
			if by == "create.end" {
				e.handle(cmd(command.KindClaim, "instance.create.end", racedVM))
			} else {
				e.reconcile()
			}
			if !raced.Load() {
				t.Fatal("no tombstone written while the claim was written")
			}
			if got := e.claimState(racedVM, 1); got != handlers.ClaimActive {
				t.Errorf("claim = %q, want active (Placement still shows the instance holding the device)", got)
			}
			if got := e.w.Count("burn", rp(1)); got != 1 {
				t.Errorf("burns = %d, want 1", got)
			}
		})
	}
}
