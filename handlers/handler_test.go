package handlers_test

import (
	"context"
	"errors"
	"github.com/scour-project/scour/pipeline"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/handlers/handlerstest"
)

// Invalid commands are permanent (poison); Placement or database outages
// are transient (retry) and name the instance and what to check.
func TestErrorClassification(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	tests := []struct {
		name      string
		cmd       func() *command.Command
		break_    func(e *env)
		permanent bool
		mention   string
	}{
		{name: "unknown version", cmd: func() *command.Command {
			c := cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
			c.Version = 99
			return c
		}, permanent: true, mention: "version"},
		{name: "missing instance", cmd: func() *command.Command {
			return cmd(command.KindRelease, "instance.delete.end", "")
		}, permanent: true, mention: "instance_uuid"},
		{name: "another host's command", cmd: func() *command.Command {
			c := cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001")
			c.Host = "compute9"
			return c
		}, permanent: true, mention: "compute9"},
		{name: "placement down on claim", cmd: func() *command.Command {
			return cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
		}, break_: func(e *env) {
			e.p.InstanceAllocationsF = func(context.Context, string) (handlers.InstanceAllocation, error) {
				return handlers.InstanceAllocation{}, down
			}
		}, mention: "instance 00000000-0000-4000-8000-000000000001"},
		{name: "placement down on delete", cmd: func() *command.Command {
			return cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001")
		}, break_: func(e *env) {
			e.p.InstanceAllocationsF = func(context.Context, string) (handlers.InstanceAllocation, error) {
				return handlers.InstanceAllocation{}, down
			}
		}, mention: "Placement"},
		{name: "claims database down", cmd: func() *command.Command {
			return cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
		}, break_: func(e *env) {
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
			e.c.Fail = func(string) error { return down }
		}, mention: "claims database"},
		{name: "burn fails", cmd: func() *command.Command {
			return cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
		}, break_: func(e *env) {
			e.w.Allocate("00000000-0000-4000-8000-000000000001", false, rp(1))
			e.p.BurnF = func(context.Context, handlers.Device) error { return down }
		}, mention: "burn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			if tt.break_ != nil {
				tt.break_(e)
			}
			err := e.h.Handle(context.Background(), tt.cmd())
			if err == nil {
				t.Fatal("Handle: nil error")
			}
			if got := handlers.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.w.Set(rp(2), func(d *handlers.Device) { d.Reserved = 1 })
	_ = e.h.Handle(context.Background(), &command.Command{Version: 7})
	e.reconcile()
	want := `
# HELP scour_lifecycle_devices One-time-use devices of this host by state at the last scan (cleaning, absent, no-profile, backoff and retired are scour's own; retired: quarantined by an operator's scourctl retire, quarantined: by a cleaning).
# TYPE scour_lifecycle_devices gauge
scour_lifecycle_devices{state="available"} 1
scour_lifecycle_devices{state="burned-in-use"} 1
scour_lifecycle_devices{state="dirty"} 1
# HELP scour_lifecycle_cleans_started_total Cleaning runs started.
# TYPE scour_lifecycle_cleans_started_total counter
scour_lifecycle_cleans_started_total 1
# HELP scour_lifecycle_unreserves_total Un-reserves of cleaned devices, by result (ok, allocated, quarantined, elsewhere: un-reserved by someone else, stale: not un-reserved, cleaned again, error).
# TYPE scour_lifecycle_unreserves_total counter
scour_lifecycle_unreserves_total{result="allocated"} 0
scour_lifecycle_unreserves_total{result="elsewhere"} 0
scour_lifecycle_unreserves_total{result="error"} 0
scour_lifecycle_unreserves_total{result="ok"} 1
scour_lifecycle_unreserves_total{result="quarantined"} 0
scour_lifecycle_unreserves_total{result="stale"} 0
# HELP scour_lifecycle_scans_total Reconciler scans of this host's Placement tree, by result.
# TYPE scour_lifecycle_scans_total counter
scour_lifecycle_scans_total{result="error"} 0
scour_lifecycle_scans_total{result="ok"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "scour_lifecycle_devices",
		"scour_lifecycle_cleans_started_total", "scour_lifecycle_unreserves_total", "scour_lifecycle_scans_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(e.reg, "scour_lifecycle_commands_total"); err != nil || n == 0 {
		t.Errorf("commands_total series = %d, %v", n, err)
	}
	mf, _ := e.reg.Gather()
	for _, f := range mf {
		if f.GetName() != "scour_lifecycle_commands_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue()
			if labels["kind"] == "claim" && labels["outcome"] == "ok" && v != 1 {
				t.Errorf("claim/ok = %v, want 1", v)
			}
		}
	}
}

// A run in flight longer than stuck_after is reported through the hook
// and the gauge.
func TestStuckRunReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, func(c *handlers.Config) { c.StuckAfter = time.Hour })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	started, release := make(chan struct{}), make(chan struct{})
	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		close(started)
		<-release
		return handlers.CleanResult{Verdict: pipeline.VerdictRetryLater}, nil
	}
	ctx := context.Background()
	if err := e.r.Scan(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	<-started
	e.clock.Advance(2 * time.Hour)
	if err := e.r.Scan(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := e.r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if len(e.stuck) != 1 || e.stuck[0] != rp(1) {
		t.Errorf("stuck reports = %v, want [rp-1]", e.stuck)
	}
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP scour_lifecycle_stuck_runs Cleaning runs in flight for longer than stuck_after.
# TYPE scour_lifecycle_stuck_runs gauge
scour_lifecycle_stuck_runs 1
`), "scour_lifecycle_stuck_runs"); err != nil {
		t.Error(err)
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, _, err := handlers.New(handlers.Config{ReconcileJitter: 2, MaxConcurrentCleans: -1},
		handlers.Deps{})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"host is required", "reconcile_jitter", "max_concurrent_cleans",
		"Placement dependency", "Claims dependency", "Hardware dependency", "Cleaner dependency", "Registerer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	w := handlerstest.NewWorld()
	deps := handlers.Deps{Placement: &handlerstest.Placement{W: w}, Claims: handlerstest.NewClaims(),
		Hardware: &handlerstest.Hardware{}, Cleaner: &handlerstest.Cleaner{W: w}, Registerer: prometheus.NewRegistry()}
	if _, _, err := handlers.New(handlers.Config{Host: "compute1"}, deps); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}
