package handlers_test

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// 100 deletes on one host drain with few scans and bounded concurrent
// cleans, one run per device, each device returned once.
func TestBurstOfReleasesDrains(t *testing.T) {
	t.Parallel()
	const n, limit = 100, 4
	e := newEnv(t, n, func(c *handlers.Config) {
		c.MaxConcurrentCleans = limit
		c.ScanDebounce = ptr(20 * time.Millisecond)
	})
	for i := 1; i <= n; i++ {
		vm := fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
		e.w.Allocate(vm, true, rp(i))
		e.handle(cmd(command.KindClaim, "instance.create.end", vm))
	}
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		time.Sleep(time.Millisecond) // a clean takes a while
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.r.Run(ctx) }()
	for i := 1; i <= n; i++ {
		vm := fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
		e.w.Free(vm)
		e.handle(cmd(command.KindRelease, "instance.delete.end", vm))
	}
	waitFor(t, func() bool {
		for i := 1; i <= n; i++ {
			if e.state(i) != placement.StateAvailable {
				return false
			}
		}
		return true
	})
	cancel()
	<-done
	scans := e.w.Count("scan", "")
	t.Logf("%d releases: %d scans, max %d concurrent cleans", n, scans, e.cl.MaxConcurrent())
	if scans > 10 {
		t.Errorf("scans = %d for %d releases, want a handful (triggers coalesce)", scans, n)
	}
	if got := e.cl.MaxConcurrent(); got > limit || got < 2 {
		t.Errorf("max concurrent cleans = %d, want 2..%d", got, limit)
	}
	if got := e.cl.Overlaps(); got != 0 {
		t.Errorf("overlapping runs for one device = %d, want 0", got)
	}
	for i := 1; i <= n; i++ {
		if c, u := e.cl.CallsFor(rp(i)), e.w.Count("unreserve", rp(i)); c != 1 || u != 1 {
			t.Errorf("%s: %d runs, %d un-reserves, want 1 and 1", rp(i), c, u)
		}
	}
}

// Handle returns while the device's clean is still running, and scans
// during the run never start a second run for the same device.
func TestCleanIsAsynchronousAndSinglePerDevice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.w.Free("00000000-0000-4000-8000-000000000001")
	started, release := make(chan struct{}), make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		close(started)
		<-release
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- e.r.Run(ctx) }()
	e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001")) // returns: clean is not awaited
	<-started
	for range 5 {
		e.handle(cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001"))
		if err := e.r.Scan(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.cl.CallsFor(rp(1)); got != 1 {
		t.Errorf("runs while one is in flight = %d, want 1", got)
	}
	close(release)
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
	cancel()
	<-done
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A scan that sees a queued device allocated drops it: the reconciler never
// starts a clean for a device its latest scan shows allocated.
func TestQueuedDeviceAllocatedIsDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, func(c *handlers.Config) { c.MaxConcurrentCleans = 1 })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.w.Set(rp(2), func(d *handlers.Device) { d.Reserved = 1 })
	started, release := make(chan struct{}, 2), make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		started <- struct{}{}
		<-release
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	ctx := context.Background()
	if err := e.r.Scan(ctx, "test"); err != nil { // rp-1 runs, rp-2 waits in the queue
		t.Fatal(err)
	}
	<-started
	e.w.Allocate("00000000-0000-4000-8000-000000000002", false, rp(2))
	if err := e.r.Scan(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := e.r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.cl.CallsFor(rp(2)); got != 0 {
		t.Errorf("runs for the device allocated while queued = %d, want 0", got)
	}
	e.wantDevice(1, placement.StateAvailable, 1, 1)
}

// A scan that classified a queued device as dirty, and meanwhile saw its
// run start, does not queue it again: after that run returned it to the
// pool, a second run would wipe an available device.
func TestNoSecondRunFromStaleQueueEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, func(c *handlers.Config) { c.MaxConcurrentCleans = 1 })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.w.Set(rp(2), func(d *handlers.Device) { d.Reserved = 1 })
	started, release := make(chan string, 4), make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		started <- req.Device.RPUUID
		<-release
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	ctx := context.Background()
	if err := e.r.Scan(ctx, "test"); err != nil { // rp-1 runs, rp-2 queued
		t.Fatal(err)
	}
	<-started
	hooked := false
	e.hw.PresentF = func(_ context.Context, a hardware.Address) (bool, error) {
		if !hooked { // between classify and enqueue: rp-1 ends, rp-2's run starts
			hooked = true
			release <- struct{}{}
			if got := <-started; got != rp(2) {
				t.Errorf("second run for %s, want rp-2", got)
			}
		}
		return true, nil
	}
	if err := e.r.Scan(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if !hooked {
		t.Fatal("the scan did not consider the queued rp-2")
	}
	close(release)
	if err := e.r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	e.wantDevice(2, placement.StateAvailable, 1, 1)
}
