package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/internal/testkit"
)

// run starts the reconciler loop and returns its stop function.
func (e *env) run() func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}
}

// The follow-up scan finds a device whose last allocation (a migration's)
// went away after the move's notification, with no further trigger.
func TestFollowUpScan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) {
		c.FollowUpDelay = 30 * time.Millisecond
		c.ReconcileInterval = time.Hour
	})
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") == 1 })
	e.w.Move("00000000-0000-4000-8000-000000000001", "mig-1", rp(1))
	e.handle(cmd(command.KindMoveSource, "instance.live_migration_post.end", "00000000-0000-4000-8000-000000000001"))
	waitFor(t, func() bool { return e.w.Count("scan", "") == 2 })
	e.w.Free("mig-1") // Nova drops the migration allocation a moment later
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
	if got := e.w.Count("scan", ""); got != 3 {
		t.Errorf("scans = %d, want 3 (start, triggered, follow-up)", got)
	}
}

// The periodic scan alone cleans a device whose notifications were all lost.
func TestPeriodicScan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) { c.ReconcileInterval = 20 * time.Millisecond })
	e.clock.real = true
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.w.Count("scan", "") >= 2 })
	e.w.Free("00000000-0000-4000-8000-000000000001") // delete.end never arrives
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
}

// A device in backoff is retried when its backoff ends, not only at the
// next (hour-long) interval.
func TestBackoffEndSchedulesScan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) {
		c.ReconcileInterval = time.Hour
		c.BackoffBase, c.BackoffMax = 20*time.Millisecond, time.Second
	})
	e.clock.real = true
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	first := true
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		if first {
			first = false
			return handlers.CleanResult{Verdict: pipeline.VerdictRetryLater}, nil
		}
		return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
	}
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
	e.wantDevice(1, placement.StateAvailable, 2, 1)
}

// A quarantine shows in scour_lifecycle_devices at once (a triggered
// scan), not at the next periodic scan.
func TestQuarantineGaugeAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) { c.ReconcileInterval = time.Hour })
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		return handlers.CleanResult{Verdict: pipeline.VerdictQuarantine, RunID: "run-1", Detail: "sanitize failed"}, nil
	}
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return devicesGauge(t, e, "quarantined") == 1 })
	if got := e.w.Count("scan", ""); got != 2 {
		t.Errorf("scans = %d, want 2 (start, after the quarantine)", got)
	}
}

// devicesGauge reads scour_lifecycle_devices{state} (-1: no such series).
func devicesGauge(t *testing.T, e *env, state string) float64 {
	return metricValue(t, e, "scour_lifecycle_devices", "state", state)
}

// metricValue reads the gauge or counter name{label=value} (-1: no such
// series).
func metricValue(t *testing.T, e *env, name, label, value string) float64 {
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// SIGTERM during a step is not a failure: an INFO line says the run will
// resume, nothing is logged at ERROR, counted as an error or backed off.
func TestShutdownDuringAStepIsNotAnError(t *testing.T) {
	t.Parallel()
	logs := &testkit.SyncBuffer{}
	e := newEnv(t, 1, func(c *handlers.Config) { c.ReconcileInterval = time.Hour })
	e.logs = logs
	e.build(func(c *handlers.Config) { c.ReconcileInterval = time.Hour })
	started := make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		close(started)
		<-ctx.Done() // a long step, until SIGTERM
		return handlers.CleanResult{}, fmt.Errorf("step sanitize: %w", ctx.Err())
	}
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	stop := e.run()
	<-started
	stop()
	out := logs.String()
	if !strings.Contains(out, "run interrupted, will resume") || strings.Contains(out, "level=ERROR") {
		t.Errorf("shutdown during a step logged:\n%s", out)
	}
	if got := metricValue(t, e, "scour_lifecycle_cleans_finished_total", "verdict", "error"); got != 0 {
		t.Errorf("cleans_finished{verdict=error} = %v, want 0", got)
	}
}

// A failed scan is retried after ScanRetry, not at the next (hour-long)
// interval: a device dirty while Placement was unreachable is cleaned
// once it answers again.
func TestFailedScanRetriesSooner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) {
		c.ReconcileInterval = time.Hour
		c.ScanRetry = 10 * time.Millisecond
	})
	e.clock.real = true
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	var mu sync.Mutex
	failures := 2
	e.p.ScanHostF = func(ctx context.Context) ([]handlers.Device, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return nil, errors.New("placement unreachable")
		}
		return e.w.ScanHost(ctx)
	}
	stop := e.run()
	defer stop()
	waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
	if got := metricValue(t, e, "scour_lifecycle_scans_total", "result", "error"); got != 2 {
		t.Errorf("failed scans = %v, want 2 (the start and the first retry)", got)
	}
}
