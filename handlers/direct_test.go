package handlers_test

import (
	"context"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// A delete reaches exactly the devices its claim held: they are read one
// by one and cleaned without a scan, so no debounce (set to an hour here)
// and no whole-tree read stands between the release and the clean. Another
// dirty device of the host waits for a scan (the safety net).
func TestReleaseCleansClaimedDevicesWithoutScan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Hour)
		c.ReconcileInterval = time.Hour
	})
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1), rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 }) // start
	e.w.Allocate("00000000-0000-4000-8000-000000000002", true, rp(3))
	e.w.Free("00000000-0000-4000-8000-000000000002") // rp-3 dirty, no notification
	e.w.Free("00000000-0000-4000-8000-000000000001")
	e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001"))
	waitFor(t, func() bool {
		return e.state(1) == placement.StateAvailable && e.state(2) == placement.StateAvailable
	})
	if got := e.w.Count("scan", ""); got != 1 {
		t.Errorf("scans = %d, want 1 (the start scan only)", got)
	}
	for i, want := range []int{1, 1, 0} {
		if got := e.w.Count("read", rp(i+1)); got != want {
			t.Errorf("%s read %d times, want %d", rp(i+1), got, want)
		}
	}
	if e.state(3) != placement.StateDirty || e.cl.CallsFor(rp(3)) != 0 {
		t.Errorf("rp-3 (no claim) = %s with %d runs; want dirty, left to the scan", e.state(3), e.cl.CallsFor(rp(3)))
	}
}

// A delete for an instance this host never recorded scans the host at
// once: its claim may have been lost, and only the tree says what it held.
func TestReleaseWithoutClaimScansAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Hour) // only merges a burst: the first trigger scans at once
		c.ReconcileInterval = time.Hour
	})
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 })
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.w.Free("00000000-0000-4000-8000-000000000001")
	e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001"))
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
	if got := e.w.Count("scan", ""); got != 2 {
		t.Errorf("scans = %d, want 2 (start, the release's)", got)
	}
}

// scan_debounce 0 means none: every trigger scans at once.
func TestZeroDebounceScansEveryTrigger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Duration(0))
		c.ReconcileInterval = time.Hour
	})
	stop := e.run()
	defer stop()
	for want := 1; want <= 4; want++ {
		waitFor(t, func() bool { return e.w.Count("scan", "") == want })
		e.r.Trigger("test")
	}
}

func TestScanDebounceDefaultsOnlyWhenUnset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  *time.Duration
		want time.Duration
	}{{nil, time.Second}, {ptr(time.Duration(0)), 0}, {ptr(5 * time.Millisecond), 5 * time.Millisecond}} {
		c := handlers.Config{Host: "h", ScanDebounce: tc.set}
		c.SetDefaults()
		if c.ScanDebounce == nil || *c.ScanDebounce != tc.want {
			t.Errorf("scan_debounce %v after defaults = %v, want %v", tc.set, c.ScanDebounce, tc.want)
		}
	}
}

// Each device of a released claim starts cleaning as soon as its own read
// shows it free and dirty: rp-1's run starts while rp-2's read is still
// held back, so the first run does not wait for the claim's last read.
func TestReleaseStartsEachDeviceOnItsOwnRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, func(c *handlers.Config) { c.ReconcileInterval = time.Hour })
	inst := "00000000-0000-4000-8000-000000000001"
	e.w.Allocate(inst, true, rp(1), rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", inst))
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 }) // start
	started := make(chan struct{})
	var once sync.Once
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if req.Device.RPUUID == rp(1) {
			once.Do(func() { close(started) })
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: "run-" + req.Device.RPUUID}, nil
	}
	early := false
	e.p.ReadDeviceF = func(ctx context.Context, d handlers.Device) (handlers.Device, error) {
		if d.RPUUID == rp(2) {
			select { // a guard against a hang, not a timing assertion
			case <-started:
				early = true
			case <-time.After(10 * time.Second):
			}
		}
		return e.w.ReadDevice(ctx, d)
	}
	e.w.Free(inst)
	e.handle(cmd(command.KindRelease, "instance.delete.end", inst))
	if !early {
		t.Error("rp-1's cleaning run started only after rp-2 was read, want it started on rp-1's own read")
	}
	waitFor(t, func() bool {
		return e.state(1) == placement.StateAvailable && e.state(2) == placement.StateAvailable
	})
	if got := e.claimState(inst, 1); got != handlers.ClaimReleased {
		t.Errorf("claim = %q, want released", got)
	}
}

// A delete for an instance that still holds one of the claim's devices
// cleans nothing it holds and keeps the claim; a device of the claim that
// is already free and dirty is cleaned (a scan would clean it too).
func TestReleaseOfStillHeldClaimCleansOnlyFreeDirtyDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	inst := "00000000-0000-4000-8000-000000000001"
	e.w.Allocate(inst, true, rp(1), rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", inst))
	e.w.Set(rp(2), func(d *handlers.Device) { d.Consumers, d.Allocated = nil, false })
	e.handle(cmd(command.KindRelease, "forged", inst))
	e.reconcile()
	if got := e.claimState(inst, 1); got != handlers.ClaimActive {
		t.Errorf("claim = %q, want active (the instance still holds rp-1)", got)
	}
	e.wantDevice(1, placement.StateBurnedInUse, 0, 0)
	e.wantDevice(2, placement.StateAvailable, 1, 1)
}

// The first device of a release is read alone, the others only after it:
// with all reads in flight, a Placement serving one request at a time
// finished the first device only after most of the others.
func TestReleaseReadsTheFirstDeviceAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, nil)
	inst := "00000000-0000-4000-8000-000000000001"
	e.w.Allocate(inst, true, rp(1), rp(2), rp(3), rp(4))
	e.handle(cmd(command.KindClaim, "instance.create.end", inst))
	var mu sync.Mutex
	var order []string
	inFlight, overlapped := 0, false
	e.p.ReadDeviceF = func(ctx context.Context, d handlers.Device) (handlers.Device, error) {
		mu.Lock()
		order = append(order, d.RPUUID)
		inFlight++
		first := len(order) == 1
		mu.Unlock()
		if first {
			time.Sleep(10 * time.Millisecond) // room for a wrongly started second read to overlap
		}
		mu.Lock()
		overlapped = overlapped || (first && inFlight > 1)
		inFlight--
		mu.Unlock()
		return e.w.ReadDevice(ctx, d)
	}
	e.w.Free(inst)
	e.handle(cmd(command.KindRelease, "instance.delete.end", inst))
	e.reconcile()
	if len(order) != 4 || order[0] != rp(1) || overlapped {
		t.Errorf("reads = %v, overlapping the first = %v; want rp-1 first and alone, then the others", order, overlapped)
	}
	for i := 1; i <= 4; i++ {
		e.wantDevice(i, placement.StateAvailable, 1, 1)
	}
}

// A scan whose read of Placement began before a release does not undo
// the release's newer read: Nova frees the device while the scan still
// holds a view of it allocated, the release reads it freed and queues it,
// and the scan then sorts its older view. Before reads were ordered the
// scan dropped the device from the queue, and it waited for the periodic
// scan (an hour here) with nothing else to clean it.
func TestOlderScanDoesNotDropANewerRelease(t *testing.T) {
	t.Parallel()
	const vm1, vm2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	e := newEnv(t, 2, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Hour)
		c.ReconcileInterval = time.Hour
		c.MaxConcurrentCleans = 1 // rp-1's run holds the only worker
	})
	e.w.Allocate(vm1, true, rp(1))
	e.w.Allocate(vm2, true, rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", vm1))
	e.handle(cmd(command.KindClaim, "instance.create.end", vm2))
	gate := make(chan struct{})
	var running sync.WaitGroup
	running.Add(1)
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if req.Device.RPUUID == rp(1) {
			running.Done()
			<-gate
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 }) // start
	e.w.Free(vm1)
	e.handle(cmd(command.KindRelease, "instance.delete.end", vm1))
	running.Wait() // rp-1 cleans; rp-2 must wait in the queue

	var once sync.Once
	e.p.ScanHostF = func(ctx context.Context) ([]handlers.Device, error) {
		devs, err := e.w.ScanHost(ctx) // rp-2 still allocated in this view
		once.Do(func() {
			e.w.Free(vm2)
			e.handle(cmd(command.KindRelease, "instance.delete.end", vm2)) // reads rp-2 freed, queues it
		})
		return devs, err
	}
	if err := e.r.Scan(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitFor(t, func() bool {
		return e.state(1) == placement.StateAvailable && e.state(2) == placement.StateAvailable
	})
	if got := e.w.Count("scan", ""); got != 2 {
		t.Errorf("scans = %d, want 2 (start, the test's): rp-2 must come back from the release's queue entry", got)
	}
}

// A release does not queue a device the store holds quarantined: its
// one-device read does not see the quarantine trait, and the cleaner would
// only quarantine it again (counted and logged twice) or open a run that
// ends aborted. The device's claim partner is cleaned as usual.
func TestReleaseLeavesStoreQuarantineToTheScan(t *testing.T) {
	t.Parallel()
	const vm = "00000000-0000-4000-8000-000000000001"
	e := newEnv(t, 2, func(c *handlers.Config) {
		c.ScanDebounce = ptr(time.Hour)
		c.ReconcileInterval = time.Hour
	})
	e.w.Allocate(vm, true, rp(1), rp(2))
	e.handle(cmd(command.KindClaim, "instance.create.end", vm))
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 }) // start
	e.c.Quarantine(rp(1), "cleaning failed: sanitize (code 12)")
	e.w.Free(vm)
	e.handle(cmd(command.KindRelease, "instance.delete.end", vm))
	waitFor(t, func() bool { return e.state(2) == placement.StateAvailable })
	if err := e.r.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.cl.CallsFor(rp(1)); n != 0 {
		t.Errorf("rp-1 (quarantined in the store) cleaned %d time(s) after the release, want 0", n)
	}
	if d := e.w.Device(rp(1)); d.Reserved != d.Total {
		t.Errorf("rp-1 reserved %d of %d, want kept reserved", d.Reserved, d.Total)
	}
}
