package handlers_test

import (
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// Open claims no allocation backs are swept once older than
// claim_expiry_time; claims held through a migration consumer and dormant
// claims stay.
func TestOrphanSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, nil)
	e.c.Expiry = 5 * time.Minute
	for i, vm := range []string{"vm-gone", "vm-moving", "vm-shelved", "vm-running"} {
		e.w.Allocate(vm, true, rp(i+1))
		e.handle(cmd(command.KindClaim, "instance.create.end", vm))
	}
	e.w.Free("vm-gone")                   // delete.end lost
	e.w.Move("vm-moving", "mig-1", rp(2)) // resize waiting for confirm
	e.w.Free("vm-shelved")                // shelved offloaded
	e.handle(cmd(command.KindShelveOffload, "instance.shelve_offload.end", "vm-shelved"))

	e.clock.Advance(time.Minute)
	e.reconcile()
	if got := e.claimState("vm-gone", 1); got != handlers.ClaimActive {
		t.Errorf("young unbacked claim = %q, want active until claim_expiry_time", got)
	}
	e.clock.Advance(5 * time.Minute)
	e.reconcile()
	for _, tt := range []struct {
		vm   string
		i    int
		want handlers.ClaimState
	}{
		{"vm-gone", 1, handlers.ClaimOrphaned},
		{"vm-moving", 2, handlers.ClaimActive},
		{"vm-shelved", 3, handlers.ClaimDormant},
		{"vm-running", 4, handlers.ClaimActive},
	} {
		if got := e.claimState(tt.vm, tt.i); got != tt.want {
			t.Errorf("%s claim = %q, want %q", tt.vm, got, tt.want)
		}
	}
}

// A claim whose device was cleaned and given to another instance (whose
// claim scour recorded) is an orphan even though the device is allocated.
func TestOrphanSweepDeviceReused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.c.Expiry = time.Minute
	e.w.Allocate("vm-a", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "vm-a"))
	e.w.Free("vm-a") // delete.end lost
	e.reconcile()    // cleaned and returned
	e.w.Allocate("vm-b", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "vm-b"))
	e.clock.Advance(2 * time.Minute)
	e.reconcile()
	if got := e.claimState("vm-a", 1); got != handlers.ClaimOrphaned {
		t.Errorf("vm-a claim = %q, want orphaned", got)
	}
	if got := e.claimState("vm-b", 1); got != handlers.ClaimActive {
		t.Errorf("vm-b claim = %q, want active", got)
	}
}
