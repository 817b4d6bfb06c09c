package handlers_test

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/placement"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/handlers/handlerstest"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
)

// clock is a settable time source shared by the handlers and the store.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	real bool // follow the wall clock (tests of the Run loop's timers)
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		return time.Now()
	}
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one host: its Placement tree, claims store, hardware and cleaner.
type env struct {
	t     *testing.T
	host  string
	w     *handlerstest.World
	p     *handlerstest.Placement
	c     *handlerstest.Claims
	hw    *handlerstest.Hardware
	cl    *handlerstest.Cleaner
	acc   *handlerstest.Accelerators // nil: Cyborg's API is not read
	h     *handlers.Handler
	r     *handlers.Reconciler
	reg   *prometheus.Registry
	clock *clock
	stuck []string
	logs  io.Writer // the handlers' log (io.Discard unless a test reads it)
}

// newEnv builds a host with n available devices rp-1..rp-n.
func newEnv(t *testing.T, n int, cfg func(*handlers.Config)) *env {
	t.Helper()
	e := &env{t: t, host: "compute1", w: handlerstest.NewWorld(), c: handlerstest.NewClaims(),
		hw: &handlerstest.Hardware{}, reg: prometheus.NewRegistry(),
		clock: &clock{t: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}}
	for i := 1; i <= n; i++ {
		e.w.AddDevice(rp(i), hardware.Address(fmt.Sprintf("0000:%02x:00.0", 0x80+i)))
	}
	// The gate journals each un-reserve PUT with the run before sending
	// it; the store refuses while the device has an open quarantine.
	e.p = &handlerstest.Placement{W: e.w, Journal: e.c.NotePut}
	// A clean verdict is stored, as the pipeline's store does: the
	// device's tenant is no previous tenant any more (refence).
	e.cl = &handlerstest.Cleaner{W: e.w, OnClean: e.c.Cleaned, OnUsedAfterClean: e.c.UsedAfterClean}
	e.c.Now = e.clock.Now
	e.build(cfg)
	return e
}

// build (re)creates handler and reconciler over the same world and store,
// as a restarted scourd would.
func (e *env) build(cfg func(*handlers.Config)) {
	e.t.Helper()
	c := handlers.Config{Host: e.host, ScanDebounce: ptr(time.Millisecond), FollowUpDelay: -1}
	if cfg != nil {
		cfg(&c)
	}
	e.reg = prometheus.NewRegistry()
	var err error
	e.h, e.r, err = handlers.New(c, handlers.Deps{Placement: e.p, Claims: e.c, Hardware: e.hw, Cleaner: e.cl,
		Registerer: e.reg, Logger: slog.New(slog.NewTextHandler(e.logOut(), nil)), Now: e.clock.Now, Accelerators: e.accelerators(),
		OnStuck: func(d handlers.Device, _ time.Duration) { e.stuck = append(e.stuck, d.RPUUID) }})
	if err != nil {
		e.t.Fatalf("handlers.New: %v", err)
	}
}

// accelerators is e.acc as the interface (a nil *Accelerators is no
// Accelerators at all).
func (e *env) accelerators() handlers.Accelerators {
	if e.acc == nil {
		return nil
	}
	return e.acc
}

func rp(i int) string { return fmt.Sprintf("rp-%d", i) }

func cmd(kind command.Kind, event, instance string) *command.Command {
	return &command.Command{Version: command.Version, Kind: kind, Scope: command.ScopeHost, Host: "compute1",
		InstanceUUID: instance, ProjectID: "project-a", EventType: event, Format: "versioned",
		MessageID: "msg-" + event + "-" + instance}
}

func (e *env) handle(c *command.Command) {
	e.t.Helper()
	if err := e.h.Handle(context.Background(), c); err != nil {
		e.t.Fatalf("Handle(%s %s): %v", c.Kind, c.EventType, err)
	}
}

// reconcile runs one scan and waits for the cleans it queued.
func (e *env) reconcile() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.r.Scan(ctx, "test"); err != nil {
		e.t.Fatalf("Scan: %v", err)
	}
	if err := e.r.WaitIdle(ctx); err != nil {
		e.t.Fatalf("WaitIdle: %v", err)
	}
}

func (e *env) state(i int) placement.State { return e.w.Device(rp(i)).State }

func (e *env) claimState(instance string, i int) handlers.ClaimState {
	c, ok := e.c.ForDevice(instance, rp(i))
	if !ok {
		return ""
	}
	return c.State
}

// wantDevice checks state and how often the device was cleaned and returned.
func (e *env) wantDevice(i int, state placement.State, cleans, unreserves int) {
	e.t.Helper()
	if got := e.state(i); got != state {
		e.t.Errorf("%s state = %s, want %s", rp(i), got, state)
	}
	if got := e.cl.CallsFor(rp(i)); got != cleans {
		e.t.Errorf("%s cleaning runs = %d, want %d", rp(i), got, cleans)
	}
	if got := e.w.Count("unreserve", rp(i)); got != unreserves {
		e.t.Errorf("%s un-reserves = %d, want %d", rp(i), got, unreserves)
	}
}

func (e *env) logOut() io.Writer {
	if e.logs == nil {
		return io.Discard
	}
	return e.logs
}

func ptr[T any](v T) *T { return &v }

// newLoggedEnv is newEnv(t, n, nil) whose handlers log into the buffer
// returned.
func newLoggedEnv(t *testing.T, n int) (*env, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	e := newEnv(t, n, nil)
	e.logs = logs
	e.build(nil)
	return e, logs
}
