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
	for i, vm := range []string{"00000000-0000-4000-8000-000000000007", "00000000-0000-4000-8000-000000000008", "00000000-0000-4000-8000-00000000000b", "00000000-0000-4000-8000-00000000000a"} {
		e.w.Allocate(vm, true, rp(i+1))
		e.handle(cmd(command.KindClaim, "instance.create.end", vm))
	}
	e.w.Free("00000000-0000-4000-8000-000000000007")                 // delete.end lost
	e.w.Move("00000000-0000-4000-8000-000000000008", "mig-1", rp(2)) // resize waiting for confirm
	e.w.Free("00000000-0000-4000-8000-00000000000b")                 // shelved offloaded
	e.handle(cmd(command.KindShelveOffload, "instance.shelve_offload.end", "00000000-0000-4000-8000-00000000000b"))

	e.clock.Advance(time.Minute)
	e.reconcile()
	if got := e.claimState("00000000-0000-4000-8000-000000000007", 1); got != handlers.ClaimActive {
		t.Errorf("young unbacked claim = %q, want active until claim_expiry_time", got)
	}
	e.clock.Advance(5 * time.Minute)
	e.reconcile()
	for _, tt := range []struct {
		vm   string
		i    int
		want handlers.ClaimState
	}{
		{"00000000-0000-4000-8000-000000000007", 1, handlers.ClaimOrphaned},
		{"00000000-0000-4000-8000-000000000008", 2, handlers.ClaimActive},
		{"00000000-0000-4000-8000-00000000000b", 3, handlers.ClaimDormant},
		{"00000000-0000-4000-8000-00000000000a", 4, handlers.ClaimActive},
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
	e.w.Allocate("00000000-0000-4000-8000-000000000005", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000005"))
	e.w.Free("00000000-0000-4000-8000-000000000005") // delete.end lost
	e.reconcile()                                    // cleaned and returned
	e.w.Allocate("00000000-0000-4000-8000-000000000006", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000006"))
	e.clock.Advance(2 * time.Minute)
	e.reconcile()
	if got := e.claimState("00000000-0000-4000-8000-000000000005", 1); got != handlers.ClaimOrphaned {
		t.Errorf("vm-a claim = %q, want orphaned", got)
	}
	if got := e.claimState("00000000-0000-4000-8000-000000000006", 1); got != handlers.ClaimActive {
		t.Errorf("vm-b claim = %q, want active", got)
	}
}
