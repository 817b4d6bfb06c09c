// Package bus is scour's application side of RabbitMQ: the topology of
// scour's queues, the dispatcher that turns Nova notifications into
// per-host commands, and the per-host intake that hands commands to a
// CommandHandler. The connection, publisher and subscriber are package
// broker's; the ack contract, retries, panics and the poison queue are
// watermill's router and middleware.
//
//	nova (topic, Nova's) ──{versioned_notifications,notifications}.{info,error}──▶
//	  scour.notifications (durable quorum; all scourd compete)
//	    └─ dispatch handler: Decode → Dispatch → publish one command (confirmed) → ack
//	         ──host.<h> / broadcast.instance──▶ scour (durable topic)
//	              └─▶ scour.host.<h> (durable quorum, one per host)
//	                    └─ intake handler: CommandHandler.Handle → ack
//	  no queue bound for it, or past the delivery limit ──▶ scour.unroutable
//	    └─ park handler ──▶ scour.poison (direct mode too: its queue dead-letters there)
//	  anything undecodable, invalid, rejected or panicking ──▶ scour.poison
//	  (every message there carries x-scour-poison-reason)
//
// Ack discipline: a delivery is acked only after its handler returned nil,
// which for the dispatcher means the broker confirmed the command it
// published. Permanent errors (undecodable input, command.ErrInvalid,
// Permanent(err), a panic) go to the poison queue and the delivery is
// acked once the poison publish is confirmed; other errors are retried
// with backoff, then the delivery is nacked and requeued.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	wmetrics "github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/notification"
)

// HeaderPoisonReason carries the stable reason of a poisoned message
// (notification.Reason values, "invalid_command", "panic", "unroutable",
// ...). watermill adds reason_poisoned (the error text) and the handler
// name beside it.
const HeaderPoisonReason = "x-scour-poison-reason"

// Bus runs scour's consumers. Create it with New, run it with Run.
type Bus struct {
	cfg     Config
	host    string
	handler CommandHandler
	m       *metrics.Metrics
	log     *slog.Logger
	// decoders of the two queues' bodies (tests make them panic)
	decodeEvent    func([]byte) (*notification.Event, error)
	decodeCommands func([]byte) ([]command.Element, error)
	seen           *recent
	topo           *topology
	slots          chan struct{} // one per CommandHandler call running (HandlerConcurrency)
	resolver       HostResolver  // routes broadcasts (RouteBroadcasts); nil: every host

	mu     sync.Mutex
	conn   *broker.Conn
	router *message.Router
	sub    *broker.Subscriber
	subs   int // subscriptions the router makes

	settledNotifications, settledCommands atomic.Uint64
}

// Stats counts deliveries this bus settled (acked, or nacked for a
// retry) since New; a redelivered message counts each time.
type Stats struct {
	Notifications uint64 // from the notifications queue
	Commands      uint64 // from this host's command queue
}

// Stats returns the counts so far (for tests and benchmarks that need to
// know when a queue has been worked off, without polling the broker).
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
	queue := cfg.NotificationsQueueOf(host) // direct mode: a per-host topic needs a per-host queue
	return &Bus{
		cfg: cfg, host: host, handler: h, m: m, log: log,
		decodeEvent:    notification.Decoder{MaxBytes: cfg.MaxMessageBytes}.Decode,
		decodeCommands: command.Decode,
		seen:           newRecent(4096),
		slots:          make(chan struct{}, cfg.HandlerConcurrency),
		topo:           &topology{cfg: &cfg, host: host, queue: queue},
	}, nil
}

// HostResolver names the hosts that hold a live (active or dormant) claim
// of an instance: claims.Store.LiveClaimHosts on a database every host
// of the fleet writes its claims to.
type HostResolver interface {
	LiveClaimHosts(ctx context.Context, instance string) ([]string, error)
}

// RouteBroadcasts makes the dispatcher send an instance-scoped broadcast
// only to the hosts r names (bus.broadcast_routing: claims). Call it
// before Run.
func (b *Bus) RouteBroadcasts(r HostResolver) { b.resolver = r }

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
	case sub.Consuming() < b.subs:
		return fmt.Errorf("%d of %d consumers running (re-subscribing)", sub.Consuming(), b.subs)
	}
	return nil
}

// Run connects (retrying with backoff until ctx ends), declares the
// topology and consumes until ctx is cancelled; then it stops taking
// messages, requeues in-flight ones and waits at most ShutdownTimeout for
// running handlers. A *TopologyError or *broker.AccessError is returned as
// is: retrying cannot fix it.
func (b *Bus) Run(ctx context.Context) error {
	conn, err := broker.Connect(ctx, broker.Options{URL: b.cfg.URL, TLS: b.cfg.TLS, Heartbeat: b.cfg.Heartbeat, Name: "scourd " + b.host,
		Retries: b.m}, b.log)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := b.declare(conn); err != nil {
		return err
	}
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
		attrs := []any{"mode", b.cfg.Mode, "notifications_queue", b.topo.queue, "broker", redacted(b.cfg.URL)}
		if b.cfg.Mode == ModeDispatch {
			attrs = append(attrs, "host_queue", b.HostQueue()) // direct mode has no host queue
		}
		b.log.Info("consuming", attrs...)
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

func redacted(url string) string {
	u, err := broker.ParseURL(url)
	if err != nil {
		return broker.Redact(url)
	}
	return u.String()
}

// declare runs every declaration once up front, each on its own channel
// (a refused declaration closes its channel), so a mismatch is reported
// before anything is consumed. A keep queue (poison, unroutable) that an
// earlier release declared without a delivery limit is declared again in
// that form, and logged: on RabbitMQ 4 it drops messages after 20
// deliveries until the operator applies the policy in docs/operations.md.
func (b *Bus) declare(conn *broker.Conn) error {
	queues := []string{b.topo.queue, b.cfg.PoisonQueue}
	if b.cfg.Mode == ModeDispatch {
		queues = append(queues, b.HostQueue())
	}
	if b.parks() {
		queues = append(queues, b.cfg.UnroutableQueue())
	}
	b.topo.resetLegacy()
	for _, q := range queues {
		// Each legacy keep queue found costs one refused channel; a
		// declaration reaches both (the poison and the unroutable queue).
		for attempt := 0; ; attempt++ {
			ch, err := conn.Channel()
			if err != nil {
				return fmt.Errorf("opening a channel: %w", err)
			}
			err = b.topo.declareFor(ch, q)
			_ = ch.Close()
			var legacy *errLegacyKeepQueue
			if errors.As(err, &legacy) && attempt < 2 {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
	}
	for _, q := range []string{b.cfg.PoisonQueue, b.cfg.UnroutableQueue()} {
		if !b.topo.isLegacy(q) {
			continue
		}
		version := conn.ServerVersion()
		level := slog.LevelWarn
		if m := broker.MajorVersion(version); m > 0 && m < 4 {
			level = slog.LevelInfo // nothing is dropped before the broker's upgrade to 4
		}
		b.log.Log(context.Background(), level, "queue declared by an earlier scour without a delivery limit: RabbitMQ 4 drops its messages after 20 deliveries, and every `scourctl poison list` is one; apply the delivery-limit policy in docs/operations.md (The poison queue)",
			"queue", q, "broker_version", version)
	}
	return nil
}

// parks reports whether anything can reach the unroutable queue, which
// park then empties into the poison queue: in dispatch mode the command
// exchange's alternate exchange, and in either mode the quorum queues'
// dead-lettering after bus.delivery_limit deliveries. Only direct mode on
// classic queues (no delivery limit, no command exchange) has neither.
// Without park, a notification dead-lettered in direct mode sat in the
// unroutable queue unseen: no poison metric, no log, not in
// `scourctl poison list`.
func (b *Bus) parks() bool { return b.cfg.Mode == ModeDispatch || !b.cfg.ClassicQueues }

func (b *Bus) wmLogger() watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(b.log.With("component", "watermill"), map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug, // watermill's info is per-subscription chatter
	})
}

// buildRouter wires the handlers. Middleware, outermost first:
// watermill's metrics; settled (Stats, poisoned counts and logs); PoisonQueue (permanent errors only, published with
// their reason header); poisonReason (names the reason, counts and logs
// it); Retry (transient errors only); Recoverer (a panic becomes an error,
// which poisonReason makes permanent: retrying a bug loops forever).
func (b *Bus) buildRouter(conn *broker.Conn) (*message.Router, error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: b.cfg.ShutdownTimeout}, b.wmLogger())
	if err != nil {
		return nil, err
	}
	poisonPub := broker.NewPublisher(conn, "") // default exchange: topic = queue name
	pq, err := middleware.PoisonQueueWithFilter(poisonPub, b.cfg.PoisonQueue, IsPermanent)
	if err != nil {
		return nil, err
	}
	r := b.cfg.Retry
	retry := middleware.Retry{MaxRetries: r.Attempts - 1, InitialInterval: r.Initial, MaxInterval: r.Max,
		Multiplier: 2, RandomizationFactor: 0.2,
		ShouldRetry: func(p middleware.RetryParams) bool { return !IsPermanent(p.Err) && !isPanic(p.Err) }}
	wmetrics.NewPrometheusMetricsBuilder(b.m.Registerer(), "scour", "watermill").AddPrometheusRouterMetrics(router)
	router.AddMiddleware(b.settled, pq, b.poisonReason, retry.Middleware, middleware.Recoverer)

	sub := broker.NewSubscriber(conn, broker.SubscriberConfig{Prefetch: b.cfg.Prefetch, ShutdownTimeout: b.cfg.ShutdownTimeout,
		Declare: func(ch *amqp.Channel, queue string) error { return b.topo.declareFor(ch, queue) }}, b.log)
	handlers := map[string]message.NoPublishHandlerFunc{}
	switch b.cfg.Mode {
	case ModeDirect:
		handlers[b.topo.queue] = (&direct{b: b}).handle
	default:
		d := &dispatcher{b: b, pub: broker.NewPublisher(conn, b.cfg.Exchange)}
		handlers[b.topo.queue] = d.handle
		handlers[b.HostQueue()] = (&intake{b: b}).handle
	}
	if b.parks() {
		handlers[b.cfg.UnroutableQueue()] = park
	}
	subs := 0
	for queue, h := range handlers {
		workers := b.cfg.Workers
		if queue == b.cfg.UnroutableQueue() {
			workers = 1
		}
		for i := range workers {
			router.AddConsumerHandler(fmt.Sprintf("%s-%d", queue, i), queue, sub, h)
			subs++
		}
	}
	b.mu.Lock()
	b.sub, b.subs = sub, subs
	b.mu.Unlock()
	return router, nil
}

// settled counts the deliveries handled (for Stats), once per delivery,
// and each message the poison queue took (counted and logged only once
// the broker confirmed it there: a failed poison publish requeues it).
func (b *Bus) settled(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if message.SubscribeTopicFromCtx(msg.Context()) == b.topo.queue {
			b.settledNotifications.Add(1)
		} else {
			b.settledCommands.Add(1)
		}
		if reason := msg.Metadata.Get(HeaderPoisonReason); reason != "" && err == nil {
			b.m.Poisoned(reason)
			b.log.Warn("message poisoned", "reason", reason, "queue", b.cfg.PoisonQueue, "message", msg.UUID,
				"handler", message.HandlerNameFromCtx(msg.Context()), "err", msg.Metadata.Get(middleware.ReasonForPoisonedKey))
		}
		return out, err
	}
}

// poisonError is an error whose message goes to the poison queue with
// reason.
type poisonError struct {
	reason string
	err    error
}

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// poison marks err for the poison queue with reason.
func poison(reason string, err error) error { return &poisonError{reason, err} }

func isPanic(err error) bool {
	var p middleware.RecoveredPanicError
	return errors.As(err, &p)
}

// poisonReason gives every error that goes to the poison queue its
// x-scour-poison-reason header: a panic ("panic",
// its stack logged, not put in a header), a decode error (its
// notification.Reason), an invalid command ("invalid_command"), a
// handler's Permanent error ("handler_rejected").
func (b *Bus) poisonReason(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		delete(msg.Metadata, HeaderPoisonReason) // one a message moved back from the poison queue carries
		out, err := h(msg)
		var reason string
		var pe *poisonError
		var p middleware.RecoveredPanicError
		switch {
		case err == nil:
			return out, nil
		case errors.As(err, &p):
			b.log.Error("panic while handling a message; it goes to the poison queue", "message", msg.UUID,
				"handler", message.HandlerNameFromCtx(msg.Context()), "panic", fmt.Sprint(p.V), "stack", p.Stacktrace)
			reason, err = "panic", Permanent(fmt.Errorf("panic: %v", p.V))
		case errors.As(err, &pe):
			reason = pe.reason
		case errors.Is(err, notification.ErrDecode):
			reason = string(notification.ReasonOf(err))
		case IsPermanent(err):
			reason = "handler_rejected"
			if errors.Is(err, command.ErrInvalid) {
				reason = "invalid_command"
			}
		default:
			return out, err
		}
		msg.Metadata.Set(HeaderPoisonReason, reason)
		return out, Permanent(err)
	}
}
