package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/command"
)

// Deps are what New wires together. Registerer is required (scour never
// uses the global registry); Logger and Now default to slog.Default and
// time.Now.
type Deps struct {
	Placement  Placement
	Claims     Claims
	Hardware   Hardware
	Cleaner    Cleaner
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
	// Accelerators, when set with a Claims that is an ARQStore, reads
	// Cyborg's ARQs to record at bind which card and attach handle an
	// instance got (cyborg.go).
	Accelerators Accelerators
	// OnStuck, when set, is called for each run found stuck by a scan.
	OnStuck func(d Device, running time.Duration)
}

// Handler turns one command into claim bookkeeping, burns and reconciler
// triggers. It never cleans: cleaning is the reconciler's, asynchronously,
// so Handle returns as soon as claims are recorded.
type Handler struct {
	cfg Config
	p   Placement
	c   Claims
	rec *Reconciler
	arq *arqs
	m   *metrics
	log *slog.Logger
	now func() time.Time
}

// New validates cfg and returns the handler (give Handle to the intake)
// and the reconciler (run it: go rec.Run(ctx)).
func New(cfg Config, d Deps) (*Handler, *Reconciler, error) {
	cfg.setDefaults()
	errs := []error{cfg.Validate()}
	for name, missing := range map[string]bool{"Placement": d.Placement == nil, "Claims": d.Claims == nil,
		"Hardware": d.Hardware == nil, "Cleaner": d.Cleaner == nil, "Registerer": d.Registerer == nil} {
		if missing {
			errs = append(errs, fmt.Errorf("lifecycle: %s dependency is nil", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, nil, fmt.Errorf("lifecycle: register metrics: %w", err)
	}
	log := d.Logger.With("host", cfg.Host)
	rec := newReconciler(cfg, d, m, log)
	h := &Handler{cfg: cfg, p: d.Placement, c: d.Claims, rec: rec, arq: rec.arq, m: m, log: log, now: d.Now}
	return h, rec, nil
}

// Handle processes one command. Ack rules for the intake: nil → ack; an
// error for which IsPermanent is true → poison; any other error →
// retry with backoff, then requeue. Handle is idempotent: duplicates and
// reordered commands are harmless, because every decision is re-read from
// Placement rather than taken from the command.
func (h *Handler) Handle(ctx context.Context, c *command.Command) error {
	if c == nil {
		return fmt.Errorf("%w: nil command", ErrPermanent)
	}
	err := h.handle(ctx, c)
	outcome := outcomeOK
	switch {
	case err == nil:
	case IsPermanent(err):
		outcome = outcomePermanent
		h.log.Error("command rejected; it goes to the poison queue", "kind", c.Kind, "event_type", c.EventType,
			"instance", c.InstanceUUID, "message_id", c.MessageID, "error", err)
	default:
		outcome = outcomeTransient
		h.log.Warn("command failed; the intake retries it", "kind", c.Kind, "event_type", c.EventType,
			"instance", c.InstanceUUID, "message_id", c.MessageID, "error", err)
	}
	h.m.commands.WithLabelValues(string(c.Kind), outcome).Inc()
	return err
}

func (h *Handler) handle(ctx context.Context, c *command.Command) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("message %s (%s): %w", c.MessageID, c.EventType, err)
	}
	if c.Scope == command.ScopeHost && c.Host != h.cfg.Host {
		return fmt.Errorf("%w: command for host %q delivered to host %q (message %s): check the intake's queue binding",
			ErrPermanent, c.Host, h.cfg.Host, c.MessageID)
	}
	log := h.log.With("kind", c.Kind, "event_type", c.EventType, "instance", c.InstanceUUID,
		"message_id", c.MessageID, "request_id", c.RequestID)
	switch c.Kind {
	case command.KindClaim:
		return h.claim(ctx, log, c)
	case command.KindRelease, command.KindShelveOffload, command.KindMoveSource, command.KindRevert:
		return h.release(ctx, log, c)
	case command.KindVolume:
		return h.volume(ctx, log, c)
	case command.KindReconcile:
		return h.reconcile(ctx, log, c)
	}
	return fmt.Errorf("%w: kind %q has no handler", ErrPermanent, c.Kind)
}

// reconcile triggers a scan. An instance-scoped broadcast (evacuate)
// scans only the hosts holding a live claim of the instance
// (ignoredBroadcast); an operator's reconcile (no instance, or
// host-scoped) always scans.
func (h *Handler) reconcile(ctx context.Context, log *slog.Logger, c *command.Command) error {
	if c.Scope == command.ScopeBroadcast && c.InstanceUUID != "" {
		claims, err := h.c.ClaimsForInstance(ctx, c.InstanceUUID)
		if err != nil {
			return fmt.Errorf("instance %s: read claims: %w (retried; check the claims database)", c.InstanceUUID, err)
		}
		if h.ignoredBroadcast(log, c, claims) {
			return nil
		}
	}
	h.rec.Trigger(fmt.Sprintf("%s (%s)", c.EventType, c.MessageID))
	return nil
}

// ignoredBroadcast reports whether c is a broadcast (revert, resize
// confirm, evacuate, a delete nova-api sent without a host) for an instance of which this host
// holds no live claim, and counts it. Such a host does nothing and reads
// nothing from Placement: at 1,000 hosts one broadcast would otherwise
// cost 1,000 reads of the instance's allocations (docs/scale.md), for
// the one or two hosts that hold a claim. A host whose claim was lost
// (or never recorded) is covered by the periodic scan, which reads its
// whole tree: what a dirty device or an orphaned allocation needs is in
// Placement, not in the command. A broadcast routed to this host by the
// dispatcher (bus.broadcast_routing) is handled the same way: routing
// only chooses who receives it.
func (h *Handler) ignoredBroadcast(log *slog.Logger, c *command.Command, claims []Claim) bool {
	if c.Scope != command.ScopeBroadcast {
		return false
	}
	if slices.ContainsFunc(claims, Claim.Live) {
		h.m.broadcasts.WithLabelValues(string(c.Kind), "live").Inc()
		return false
	}
	h.m.broadcasts.WithLabelValues(string(c.Kind), "none").Inc()
	log.Debug("broadcast for an instance without a live claim on this host: nothing to do, Placement not read (the periodic scan covers a lost claim)")
	return true
}
