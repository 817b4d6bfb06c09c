// Package app is the one place that wires scourd together: configuration,
// logger, metrics and HTTP endpoints, the bus, and the command handler.
// cmd/scourd only parses flags, loads the configuration and calls New and
// Run. Later features plug in through Deps (the real command handlers).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/version"
)

// Deps are the parts of the application that callers may supply. Zero
// values get the defaults: with no Handler, New builds the real lifecycle
// (claims store, Placement gate, hardware backend, pipeline engine,
// handlers and reconciler) unless lifecycle.enabled is false.
type Deps struct {
	// Handler acts on the commands addressed to this host. Default: the
	// lifecycle handlers, or a bus.Recorder that logs and remembers the
	// commands when the lifecycle is disabled.
	Handler bus.CommandHandler
	// Metrics default to a fresh registry.
	Metrics *metrics.Metrics
}

// App is a wired scourd.
type App struct {
	Config  *config.Config
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Bus     *bus.Bus
	Handler bus.CommandHandler
	http    *metrics.Server
	// admin is scourd's local admin socket; nil without the lifecycle.
	admin *admin.Server
	// lifecycle is nil when the caller supplied Handler or the lifecycle
	// is disabled (dispatch-only).
	lifecycle *lifecycle
}

// New wires the application. It binds the HTTP listener (a busy port fails
// here) but connects to nothing. cleanup releases what New acquired; call
// it after Run returned (or instead of Run).
func New(cfg *config.Config, log *slog.Logger, deps Deps) (a *App, cleanup func(), err error) {
	if cfg == nil || log == nil {
		return nil, nil, errors.New("app.New: config and logger are required")
	}
	if deps.Metrics == nil {
		deps.Metrics = metrics.New()
	}
	log = log.With("host", cfg.Host)
	var lc *lifecycle
	lcCleanup := func() {}
	switch {
	case deps.Handler != nil:
	case cfg.Lifecycle.Disabled():
		deps.Handler = &bus.Recorder{Log: log}
	default:
		if lc, lcCleanup, err = newLifecycle(cfg, log, deps.Metrics.Registerer()); err != nil {
			return nil, nil, err
		}
		deps.Handler = handlers.Intake(lc.handler)
	}
	b, err := bus.New(cfg.Bus, cfg.Host, deps.Handler, deps.Metrics, log)
	if err != nil {
		lcCleanup()
		return nil, nil, err
	}
	if err := routeBroadcasts(cfg, b, lc, log); err != nil {
		lcCleanup()
		return nil, nil, err
	}
	a = &App{Config: cfg, Log: log, Metrics: deps.Metrics, Bus: b, Handler: deps.Handler, lifecycle: lc}
	a.http, err = metrics.Listen(cfg.HTTP.Address, deps.Metrics.Handler(b.Ready))
	if err != nil {
		lcCleanup()
		return nil, nil, err
	}
	if lc != nil {
		if a.admin, err = admin.Listen(cfg.Admin, lc, log); err != nil {
			_ = a.http.Shutdown(context.Background())
			lcCleanup()
			return nil, nil, err
		}
	}
	cleanup = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.http.Shutdown(ctx)
		if a.admin != nil {
			_ = a.admin.Shutdown(ctx)
		}
		lcCleanup()
	}
	return a, cleanup, nil
}

// routeBroadcasts applies bus.broadcast_routing: with claims (or auto and
// a PostgreSQL claims store) the dispatcher asks the claims database
// which hosts hold the instance and sends a broadcast only there. That is
// sound only when every scourd of the fleet (every consumer of the
// notification queue's commands) writes its claims to that database,
// which is what one PostgreSQL database for the fleet means (docs/claims.md);
// a sqlite store knows this host only, so auto keeps broadcasting.
func routeBroadcasts(cfg *config.Config, b *bus.Bus, lc *lifecycle, log *slog.Logger) error {
	mode := cfg.Bus.BroadcastRouting
	shared := lc != nil && cfg.Claims.Driver == claims.DriverPostgres
	if err := cfg.ClaimsRoutingProblem(); err != nil {
		return err // config.Validate reports it first (--check-config, exit 2)
	}
	switch {
	case cfg.Bus.Mode == bus.ModeDirect:
		return nil // no dispatcher
	case mode == bus.RoutingClaims && lc == nil: // a handler injected in place of the lifecycle
		return errors.New("bus.broadcast_routing: claims needs the lifecycle's claims store")
	case mode == bus.RoutingClaims, (mode == bus.RoutingAuto || mode == "") && shared:
		b.RouteBroadcasts(lc.store)
		log.Info("broadcasts are routed to the hosts holding the instance's claims (claims database); every host only when none is found")
	}
	return nil
}

// HTTPAddr is the bound address of the metrics/health listener.
func (a *App) HTTPAddr() string { return a.http.Addr() }

// Run serves HTTP and runs the bus until ctx is cancelled (graceful stop,
// bounded by bus.shutdown_timeout) or the bus fails, or until the
// lifecycle fails (its host lock lost: claims.ErrHostLockLost), which
// stops the bus and returns the error. A *bus.TopologyError means the
// configuration must change: do not restart in a loop.
func (a *App) Run(ctx context.Context) error {
	go a.http.Serve(a.Log)
	if a.admin != nil {
		go a.admin.Serve()
	}
	a.Log.Info("scourd starting", "version", version.Version, "node", a.Config.Node,
		"mode", a.Config.Bus.Mode, "http", a.http.Addr())
	lcDone := make(chan error, 1)
	lcCtx, stopLifecycle := context.WithCancel(ctx)
	defer stopLifecycle()
	busCtx, stopBus := context.WithCancel(ctx)
	defer stopBus()
	if a.lifecycle != nil {
		go func() {
			err := a.lifecycle.run(lcCtx)
			if err != nil {
				// Lost host lock: no commands without the lifecycle.
				stopBus()
			}
			lcDone <- err
		}()
	} else {
		lcDone <- nil
	}
	err := a.Bus.Run(busCtx)
	// The bus stopped taking commands; in-flight cleans stop at their
	// checkpoints and resume at the next start.
	stopLifecycle()
	lcErr := <-lcDone
	switch {
	case lcErr != nil && ctx.Err() == nil:
		// Exit non-zero: systemd restarts scourd, which takes the lock
		// again once no other scourd holds it.
		return fmt.Errorf("lifecycle: %w", lcErr)
	case lcErr != nil:
		a.Log.Error("reconciler stopped with an error", "err", lcErr)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("bus: %w", err)
	case err != nil:
		a.Log.Warn("shutdown incomplete: in-flight messages were requeued", "err", err)
	}
	a.Log.Info("scourd stopped")
	return nil
}

// NewLogger builds the slog logger the log section asks for. Durations
// are written as Go writes them ("1m30s", "250ms"), not in nanoseconds,
// and a key a logger already carries is not added again by a With further
// down (the reconciler's "host" on top of scourd's).
func NewLogger(c config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDuration}
	if c.Format == "text" {
		return slog.New(uniqueKeys{Handler: slog.NewTextHandler(w, opts)})
	}
	return slog.New(uniqueKeys{Handler: slog.NewJSONHandler(w, opts)})
}

func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// uniqueKeys drops attributes of With whose key the logger already has
// (at the same group level): the first one stays.
type uniqueKeys struct {
	slog.Handler
	keys map[string]bool
}

func (h uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	keys := make(map[string]bool, len(h.keys)+len(as))
	for k := range h.keys {
		keys[k] = true
	}
	var keep []slog.Attr
	for _, a := range as {
		if !keys[a.Key] {
			keys[a.Key] = true
			keep = append(keep, a)
		}
	}
	return uniqueKeys{Handler: h.Handler.WithAttrs(keep), keys: keys}
}

func (h uniqueKeys) WithGroup(name string) slog.Handler {
	return uniqueKeys{Handler: h.Handler.WithGroup(name)}
}
