// Package bus is scour's RabbitMQ side: the topology, the dispatcher that
// turns Nova notifications into per-host commands, and the per-host intake
// that hands commands to a CommandHandler.
//
//	nova (topic, Nova's) ──versioned_notifications.info / notifications.info──▶
//	  scour.notifications (durable quorum; all scourd compete)
//	    └─ dispatch handler: Decode → Dispatch → publish (confirmed) → ack
//	         ──host.<h> / broadcast.instance──▶ scour (durable topic)
//	              └─▶ scour.host.<h> (durable quorum, one per host)
//	                    └─ intake handler: CommandHandler.Handle → ack
//	  anything undecodable or invalid ──▶ scour.poison (x-scour-poison-reason)
//
// Ack discipline: a delivery is acked only after its handler returned and
// every message it published was confirmed by the broker. Permanent errors
// (undecodable input, command.ErrInvalid, Permanent(err), a handler panic)
// go to the poison queue and are acked once the poison publish is
// confirmed; other errors are retried in-process with backoff, then the
// delivery is nacked and requeued. Nothing is acked before it is safe.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"

	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/notification"
)

// HeaderPoisonReason carries the stable reason of a poisoned message
// (notification.Reason values, "invalid_command", "panic", ...). watermill
// adds reason_poisoned (the error text) and the handler name beside it.
const HeaderPoisonReason = "x-scour-poison-reason"

// Bus runs scour's consumers. Create it with New, run it with Run.
type Bus struct {
	cfg     Config
	host    string
	handler CommandHandler
	m       *metrics.Metrics
	log     *slog.Logger
	decoder notification.Decoder
	pool    *decoders // runs decoder on long-lived goroutines (set by Run)
	seen    *recent
	topo    *topology
	slots   chan struct{} // one per CommandHandler call running (HandlerConcurrency)

	mu     sync.Mutex
	conn   *conn
	router *message.Router
	dialer *dialer
	sub    *subscriber
	subs   int32 // subscriptions the router makes

	settledNotifications, settledCommands atomic.Uint64
	poisonSeq                             atomic.Uint64 // names commands poisoned out of a batch
}

// Stats counts deliveries this bus settled (acked, or nacked for a
// retry) since New; a redelivered message counts each time.
type Stats struct {
	Notifications uint64 // from the notifications queue
	Commands      uint64 // from this host's command queue
}

// Stats returns the counts so far (cheap: for tests and benchmarks that
// need to know when a queue has been worked off, without polling the
// broker).
func (b *Bus) Stats() Stats {
	return Stats{Notifications: b.settledNotifications.Load(), Commands: b.settledCommands.Load()}
}

// New checks cfg (SetDefaults is applied to a copy) and returns a Bus for
// host. Nothing connects until Run.
func New(cfg Config, host string, h CommandHandler, m *metrics.Metrics, log *slog.Logger) (*Bus, error) {
	cfg.SetDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if host == "" {
		errs = append(errs, errors.New("host: empty"))
	}
	if h == nil || m == nil || log == nil {
		errs = append(errs, errors.New("bus.New: handler, metrics and logger are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	queue := cfg.NotificationsQueue
	if cfg.Mode == ModeDirect && queue == "scour.notifications" {
		queue += "." + host // a per-host topic needs a per-host queue
	}
	return &Bus{
		cfg: cfg, host: host, handler: h, m: m, log: log,
		decoder: notification.Decoder{MaxBytes: cfg.MaxMessageBytes},
		seen:    newRecent(4096),
		slots:   make(chan struct{}, cfg.HandlerConcurrency),
		topo:    &topology{cfg: &cfg, host: host, queue: queue},
	}, nil
}

// NotificationsQueue is the queue this bus consumes notifications from.
func (b *Bus) NotificationsQueue() string { return b.topo.queue }

// HostQueue is this host's command queue (dispatch mode).
func (b *Bus) HostQueue() string { return b.cfg.HostQueue(b.host) }

// Ready returns nil while connected and consuming.
func (b *Bus) Ready() error {
	b.mu.Lock()
	conn, router, sub := b.conn, b.router, b.sub
	b.mu.Unlock()
	switch {
	case conn == nil || router == nil:
		return errors.New("not started")
	case !conn.IsConnected():
		return errors.New("not connected to the broker (reconnecting)")
	case !router.IsRunning() || router.IsClosed():
		return errors.New("consumers not running")
	case sub.consuming.Load() < b.subs:
		return fmt.Errorf("%d of %d consumers running (re-subscribing)", sub.consuming.Load(), b.subs)
	}
	return nil
}

// Run connects (retrying with backoff until ctx ends), declares the
// topology and consumes until ctx is cancelled; then it stops taking
// messages, requeues in-flight ones and waits at most ShutdownTimeout for
// running handlers. A *TopologyError is returned as is: retrying cannot fix
// it.
func (b *Bus) Run(ctx context.Context) error {
	conn, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := b.declare(conn); err != nil {
		return err
	}
	b.pool = newDecoders(b.decoder, runtime.GOMAXPROCS(0))
	defer b.pool.Close() // after the router: handlers that outlive its close timeout get errDecodersStopped
	router, err := b.buildRouter(conn)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.conn, b.router = conn, router
	b.mu.Unlock()

	done := make(chan error, 1)
	go func() { done <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
		b.log.Info("consuming", "mode", b.cfg.Mode, "notifications_queue", b.topo.queue,
			"host_queue", b.HostQueue(), "broker", b.redactedURL())
	case err := <-done:
		return fmt.Errorf("router: %w", err)
	}
	select {
	case <-ctx.Done():
		b.log.Info("stopping consumers; in-flight messages may finish, the rest is requeued", "timeout", b.cfg.ShutdownTimeout)
		cerr := router.Close()
		<-done
		return cerr
	case err := <-done:
		return fmt.Errorf("consumers stopped: %w", err)
	}
}

func (b *Bus) redactedURL() string {
	u, err := ParseBrokerURL(b.cfg.URL)
	if err != nil {
		return Redact(b.cfg.URL)
	}
	return u.String()
}

// connect dials the broker, retrying with capped exponential backoff: a
// broker that is down at start-up is waited for, not a reason to exit. The
// connection then reconnects by itself (conn).
func (b *Bus) connect(ctx context.Context) (*conn, error) {
	uri, ac, d, err := amqpConfig(&b.cfg, "scourd "+b.host)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.dialer = d
	b.mu.Unlock()
	dial := func() (*amqp.Connection, error) { return amqp.DialConfig(uri, *ac) }
	backoff := func() retry.Backoff {
		return retry.WithJitterPercent(20, retry.WithCappedDuration(30*time.Second, retry.NewExponential(500*time.Millisecond)))
	}
	var c *conn
	refused := 0
	err = retry.Do(ctx, backoff(), func(context.Context) error {
		k, err := openConn(dial, backoff, b.log)
		if ae := asAccessError(err, b.redactedURL(), vhostOf(b.cfg.URL)); ae != nil {
			b.log.Error("the broker refused scour's login: change the configuration", "err", ae, "attempt", refused+1)
			if refused++; refused >= refusalAttempts {
				return ae
			}
			return retry.RetryableError(err)
		}
		if err != nil {
			refused = 0
			b.log.Warn("broker not reachable, retrying", "broker", b.redactedURL(), "err", err)
			return retry.RetryableError(err)
		}
		c = k
		return nil
	})
	var ae *AccessError
	if errors.As(err, &ae) {
		return nil, ae
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", b.redactedURL(), err)
	}
	return c, nil
}

// declare runs every declaration once up front, each on its own channel
// (a refused declaration closes its channel), so a mismatch is reported
// before anything is consumed.
func (b *Bus) declare(conn *conn) error {
	steps := []func(channel) error{b.topo.notifications, b.topo.poison}
	if b.cfg.Mode == ModeDispatch {
		steps = append(steps, b.topo.hostQueue)
	}
	for _, step := range steps {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("opening a channel: %w", err)
		}
		err = step(ch)
		_ = ch.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *Bus) wmLogger() watermill.LoggerAdapter {
	l := b.log.With("component", "watermill")
	return levelGate{watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug, // watermill's info is per-subscription chatter
	}), l}
}

// levelGate drops watermill's debug, info and trace lines before they are
// built when the logger would discard them: the router logs two trace
// lines per message, and watermill's slog adapter builds their attributes
// first.
type levelGate struct {
	watermill.LoggerAdapter
	log *slog.Logger
}

func (g levelGate) Info(msg string, fields watermill.LogFields) { // mapped to debug
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		g.LoggerAdapter.Info(msg, fields)
	}
}

func (g levelGate) Debug(msg string, fields watermill.LogFields) {
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		g.LoggerAdapter.Debug(msg, fields)
	}
}

func (g levelGate) Trace(msg string, fields watermill.LogFields) {
	if g.log.Enabled(context.Background(), watermill.LevelTrace) {
		g.LoggerAdapter.Trace(msg, fields)
	}
}

func (g levelGate) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return levelGate{g.LoggerAdapter.With(fields), g.log}
}

// buildRouter wires the handlers. Middleware, outermost first: the
// subscriber's (it acks or nacks the delivery with the chain's verdict),
// PoisonQueue (permanent errors only), then Recoverer (a panic becomes a
// permanent error: retrying a bug loops forever), then the router metrics
// (routerMetrics: watermill's names, without its per-message goroutine and
// label maps). Transient errors are
// retried inside the handlers (withRetry), so counting happens once per
// delivery.
func (b *Bus) buildRouter(conn *conn) (*message.Router, error) {
	log := b.wmLogger()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: b.cfg.ShutdownTimeout}, log)
	if err != nil {
		return nil, err
	}
	poisonPub := newConfirmPublisher(conn, "", 1) // default exchange: topic = queue name
	pq, err := middleware.PoisonQueueWithFilter(poisonPub, b.cfg.PoisonQueue, b.poisonFilter)
	if err != nil {
		return nil, err
	}
	rm, err := newRouterMetrics(b.m.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering router metrics: %w", err)
	}
	declare := map[string]func(channel) error{b.topo.queue: b.topo.notifications, b.HostQueue(): b.topo.hostQueue}
	sub := newSubscriber(conn, b.cfg.Prefetch, b.cfg.ShutdownTimeout, func(ch channel, queue string) error {
		if d, ok := declare[queue]; ok {
			return d(ch)
		}
		return fmt.Errorf("no topology for queue %q", queue)
	}, b.log)
	router.AddMiddleware(sub.middleware, pq, b.recoverer, rm.middleware)
	sub.settled = func(queue string, msg *message.Message, acked bool) {
		rm.settled(msg, acked)
		if queue == b.topo.queue {
			b.settledNotifications.Add(1)
		} else {
			b.settledCommands.Add(1)
		}
	}
	subs := int32(b.cfg.Workers)
	if b.cfg.Mode == ModeDispatch {
		subs *= 2 // notifications + host queue
	}
	b.mu.Lock()
	b.sub, b.subs = sub, subs
	b.mu.Unlock()
	switch b.cfg.Mode {
	case ModeDirect:
		d := &direct{b: b}
		for i := range b.cfg.Workers {
			router.AddConsumerHandler(fmt.Sprintf("direct-%d", i), b.topo.queue, sub, d.handle)
		}
	default:
		cmdPub := newConfirmPublisher(conn, b.cfg.Exchange, publishLanes)
		d := &dispatcher{b: b, batch: newBatcher(cmdPub, b.m.CommandBatch)}
		in := &intake{b: b, poison: poisonPub}
		for i := range b.cfg.Workers {
			router.AddConsumerHandler(fmt.Sprintf("dispatch-%d", i), b.topo.queue, sub, d.handle)
			router.AddConsumerHandler(fmt.Sprintf("intake-%d", i), b.HostQueue(), sub, in.handle)
		}
	}
	return router, nil
}

// publishLanes is the number of confirm channels commands are published
// on, so one slow confirm stream (a queue leader on a busy node) does not
// hold up every publish. On a single-node broker 1 and 4 measured the same.
const publishLanes = 2

// poisonFilter: only errors retrying cannot fix go to the poison queue.
func (b *Bus) poisonFilter(err error) bool {
	return IsPermanent(err) || errors.Is(err, notification.ErrDecode)
}

// recoverer turns a handler panic into a permanent error (poisoned with
// reason "panic") instead of crashing the worker.
func (b *Bus) recoverer(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (out []*message.Message, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = b.poison(msg, "panic", fmt.Errorf("handler panic: %v", r))
			}
		}()
		return h(msg)
	}
}

// withRetry runs fn, retrying transient errors with capped, jittered
// exponential backoff. It returns the last error.
//
// The first try runs without go-retry: building the backoff allocates
// five closures, which every message paid for although nearly all succeed
// at once. A retryable first error is handed to retry.Do as its first
// attempt, so the attempts and delays are exactly go-retry's.
func (b *Bus) withRetry(ctx context.Context, fn func(context.Context) error) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	first := fn(ctx)
	if first == nil || IsPermanent(first) {
		return first
	}
	r := b.cfg.Retry
	bo := retry.WithMaxRetries(uint64(r.Attempts-1),
		retry.WithJitterPercent(20, retry.WithCappedDuration(r.Max, retry.NewExponential(r.Initial))))
	return retry.Do(ctx, bo, func(ctx context.Context) error {
		err := first
		if err != nil {
			first = nil // the try above
		} else {
			err = fn(ctx)
		}
		if err != nil && !IsPermanent(err) {
			return retry.RetryableError(err)
		}
		return err
	})
}

// poison marks msg with reason and returns err as permanent.
func (b *Bus) poison(msg *message.Message, reason string, err error) error {
	msg.Metadata.Set(HeaderPoisonReason, reason)
	b.m.Poisoned(reason)
	b.log.Warn("message poisoned", "reason", reason, "queue", b.cfg.PoisonQueue, "err", err)
	return Permanent(err)
}
