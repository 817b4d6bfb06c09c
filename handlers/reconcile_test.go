package handlers_test

import (
	"context"
	"github.com/scour-project/scour/placement"
	"time"

	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
)

// The reconciler alone reaches the end state from any starting point,
// including notifications never delivered, and a second pass changes
// nothing.
func TestReconcilerReachesEndState(t *testing.T) {
	t.Parallel()
	type dev struct {
		setup               func(e *env)
		want                placement.State
		cleans, unreserves  int
		burns, quarantining int
	}
	tests := map[string]dev{
		"available stays": {setup: func(e *env) {}, want: placement.StateAvailable},
		"dirty, delete never delivered": {setup: func(e *env) {
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
			e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
			e.w.Free("00000000-0000-4000-8000-000000000001")
		}, want: placement.StateAvailable, cleans: 1, unreserves: 1},
		"dirty, no notification at all (evacuated host back)": {setup: func(e *env) {
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
			e.w.Free("00000000-0000-4000-8000-000000000001")
		}, want: placement.StateAvailable, cleans: 1, unreserves: 1},
		"allocated, Nova did not burn, create never delivered": {setup: func(e *env) {
			e.w.Allocate("00000000-0000-4000-8000-000000000001", false, rp(1))
		}, want: placement.StateBurnedInUse, burns: 1},
		"burned in use": {setup: func(e *env) { e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1)) }, want: placement.StateBurnedInUse},
		"allocated to a migration": {setup: func(e *env) {
			e.w.Allocate("mig-1", true, rp(1))
		}, want: placement.StateBurnedInUse},
		"quarantined stays": {setup: func(e *env) {
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved, d.Quarantined = 1, true })
		}, want: placement.StateQuarantined},
		"unmanaged shape is skipped": {setup: func(e *env) {
			e.w.Set(rp(1), func(d *handlers.Device) { d.Total, d.Reserved = 2, 2 })
		}, want: placement.StateUnmanaged},
		"dirty but not a PCI device of this host": {setup: func(e *env) {
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
			e.hw.PresentF = func(_ context.Context, a hardware.Address) (bool, error) { return a != "0000:81:00.0", nil }
		}, want: placement.StateDirty},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			tt.setup(e)
			for range 2 {
				e.reconcile()
			}
			e.wantDevice(1, tt.want, tt.cleans, tt.unreserves)
			if got := e.w.Count("burn", rp(1)); got != tt.burns {
				t.Errorf("burns = %d, want %d", got, tt.burns)
			}
			if got := e.w.Count("quarantine", rp(1)); got != 0 {
				t.Errorf("quarantines = %d, want 0", got)
			}
		})
	}
}

// A restarted scourd finds the dirty device on its start scan: a run the
// previous process lost (killed mid-clean) is done once, returned once.
func TestRestartFindsDirtyDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1), rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.w.Free("00000000-0000-4000-8000-000000000001")
	crashed := make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		close(crashed) // the process dies here: no verdict ever comes
		<-ctx.Done()
		return handlers.CleanResult{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.build(func(c *handlers.Config) { c.MaxConcurrentCleans = 1 })
	done := make(chan error)
	go func() { done <- e.r.Run(ctx) }()
	<-crashed
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if e.state(1) != placement.StateDirty || e.state(2) != placement.StateDirty {
		t.Fatalf("after the crash: %s %s, want both dirty (nothing returned uncleaned)", e.state(1), e.state(2))
	}
	e.cl.CleanF = nil
	e.build(nil) // restart: fresh handler and reconciler, same Placement and store
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { done <- e.r.Run(ctx2) }()
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable && e.state(2) == placement.StateAvailable })
	cancel2()
	<-done
	for i := 1; i <= 2; i++ {
		if got := e.w.Count("unreserve", rp(i)); got != 1 {
			t.Errorf("%s returned %d times, want 1", rp(i), got)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
