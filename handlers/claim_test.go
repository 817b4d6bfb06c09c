package handlers_test

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/placement"

	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// Every claim event records a claim per device of this host and burns what
// Nova left unburned; replays change nothing.
func TestClaimEvents(t *testing.T) {
	t.Parallel()
	events := []string{"instance.create.end", "instance.unshelve.end", "instance.resize_finish.end",
		"instance.live_migration_post_dest.end", "instance.rebuild.end", "compute.instance.create.end"}
	for _, ev := range events {
		for _, novaBurns := range []bool{false, true} {
			t.Run(ev, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, 3, nil)
				e.w.Allocate("00000000-0000-4000-8000-000000000001", novaBurns, rp(1), rp(2))
				for range 3 { // duplicates are harmless
					e.handle(cmd(command.KindClaim, ev, "00000000-0000-4000-8000-000000000001"))
				}
				for _, i := range []int{1, 2} {
					if got := e.claimState("00000000-0000-4000-8000-000000000001", i); got != handlers.ClaimActive {
						t.Errorf("claim on %s = %q, want active", rp(i), got)
					}
					wantBurns := 1
					if novaBurns {
						wantBurns = 0
					}
					if got := e.w.Count("burn", rp(i)); got != wantBurns {
						t.Errorf("%s burned %d times, want %d", rp(i), got, wantBurns)
					}
					if got := e.state(i); got != placement.StateBurnedInUse {
						t.Errorf("%s = %s, want burned-in-use", rp(i), got)
					}
				}
				all := e.c.All()
				if len(all) != 1 || len(all[0].Devices) != 2 {
					t.Fatalf("claims = %+v, want one claim with rp-1 and rp-2", all)
				}
				c := all[0]
				if c.VCPU != 4 || c.MemoryMB != 8192 || c.Host != "compute1" || c.Devices[0].Address != "0000:81:00.0" {
					t.Errorf("claim = %+v, want compute resources and this host's device identity", c)
				}
			})
		}
	}
}

// A claim command for an instance that holds nothing here any more (it was
// deleted first, or the command is forged) records and burns nothing.
func TestLateClaimRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000007"))
	if n := len(e.c.All()); n != 0 {
		t.Errorf("claims = %d, want 0", n)
	}
	if n := e.w.Count("burn", rp(1)); n != 0 {
		t.Errorf("burns = %d, want 0", n)
	}
}

// Reordered delivery: delete.end before create.end. The delete finds no
// allocation, the reconciler cleans the device, the late create does
// nothing, and the device ends available, cleaned once.
func TestDeleteBeforeCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.w.Free("00000000-0000-4000-8000-000000000001") // Nova deleted it; create.end is still in flight
	e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001"))
	e.reconcile()
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	if n := len(e.c.All()); n != 0 {
		t.Errorf("claims = %d, want 0", n)
	}
}

// delete.end marks claims released and the device is cleaned and returned
// exactly once, however often the delete is delivered.
func TestReleaseCleansOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.w.Free("00000000-0000-4000-8000-000000000001")
	for range 3 {
		e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001"))
		e.reconcile()
	}
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimReleased {
		t.Errorf("claim = %q, want released", got)
	}
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	e.wantDevice(2, placement.StateAvailable, 0, 0)
	if calls := e.cl.Calls(); len(calls) != 1 || calls[0].PreviousInstance != "00000000-0000-4000-8000-000000000001" || calls[0].PreviousProject != "project-a" {
		t.Errorf("clean requests = %+v, want one naming vm-1 of project-a", calls)
	}
	if got := e.cl.Returned(); len(got) != 1 {
		t.Errorf("records closed as returned = %v, want 1", got)
	}
}

// A forged (or early) delete for a running instance can cause a scan and
// nothing else: its claim stays, nothing is cleaned or un-reserved.
func TestForgedDeleteForRunningInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	for _, k := range []command.Kind{command.KindRelease, command.KindMoveSource, command.KindShelveOffload, command.KindRevert} {
		e.handle(cmd(k, "forged", "00000000-0000-4000-8000-000000000001"))
		e.reconcile()
	}
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimActive {
		t.Errorf("claim = %q, want active", got)
	}
	e.wantDevice(1, placement.StateBurnedInUse, 0, 0)
}

// Burn refusals that retrying cannot change do not fail the command: a
// device freed meanwhile is left to the reconciler, an unmanaged shape is
// skipped.
func TestBurnRefusals(t *testing.T) {
	t.Parallel()
	for _, refusal := range []error{placement.ErrNotAllocated, placement.ErrUnmanaged} {
		t.Run(refusal.Error(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2, nil)
			e.w.Allocate("00000000-0000-4000-8000-000000000001", false, rp(1), rp(2))
			e.p.BurnF = func(ctx context.Context, d handlers.Device) error {
				if d.RPUUID == rp(1) {
					return fmt.Errorf("burn %s: %w", d.RPName, refusal)
				}
				return e.w.Burn(ctx, d)
			}
			e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
			all := e.c.All()
			if len(all) != 1 || len(all[0].Devices) != 1 || all[0].Devices[0].RPUUID != rp(2) {
				t.Errorf("claims = %+v, want one claim holding only rp-2", all)
			}
		})
	}
}
