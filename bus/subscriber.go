package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// subscriber feeds the watermill router from RabbitMQ queues.
//
// It replaces watermill-amqp's Subscriber, which hands the router one
// message per subscription at a time (it waits for the ack before reading
// the next delivery): a handler that waits for a publisher confirm
// (about 5 ms on a durable queue here) then caps a consumer at ~200
// messages/s, and more subscriptions did not help (measured with
// bus/benchingest). Here every delivery the prefetch window allows goes to
// the router at once (the router runs each in its own goroutine) and is
// acked, or nacked with requeue, as soon as the handler chain returns (see
// middleware, which the router must run outermost), so confirms pipeline
// on one channel.
//
// Shutdown (Close) is graceful: the consumer is cancelled so no new
// deliveries arrive, in-flight messages get up to shutdownTimeout to finish
// (their contexts are not cancelled before that), then the channel is
// closed and the broker requeues whatever is still unacked.
//
// Each (re)subscription first runs declare for the queue on a channel of
// its own, so after a broker restart Nova's non-durable exchange and our
// bindings exist again.
type subscriber struct {
	conn            *conn
	prefetch        int
	shutdownTimeout time.Duration
	declare         func(ch channel, queue string) error
	log             *slog.Logger
	// settled, when set, is told of each delivery acked or nacked (just
	// before the ack or nack is sent).
	settled func(queue string, msg *message.Message, acked bool)

	closing   chan struct{}
	closeOnce sync.Once
	hardStop  context.Context // cancelled shutdownTimeout after Close
	stopHard  context.CancelFunc
	wg        sync.WaitGroup
	consuming atomic.Int32 // subscriptions with a live consumer
}

var _ message.Subscriber = (*subscriber)(nil)

func newSubscriber(conn *conn, prefetch int, shutdown time.Duration, declare func(channel, string) error, log *slog.Logger) *subscriber {
	hard, stop := context.WithCancel(context.Background())
	return &subscriber{conn: conn, prefetch: prefetch, shutdownTimeout: shutdown, declare: declare, log: log,
		closing: make(chan struct{}), hardStop: hard, stopHard: stop}
}

// Subscribe consumes queue until ctx ends or Close; the channel closes then.
func (s *subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		s.consumeLoop(ctx, queue, out)
	}()
	return out, nil
}

// Close stops every subscription gracefully (see the type comment).
func (s *subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		t := time.AfterFunc(s.shutdownTimeout, s.stopHard)
		s.wg.Wait()
		t.Stop()
		s.stopHard()
	})
	return nil
}

func (s *subscriber) stopping(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-s.closing:
		return true
	default:
		return false
	}
}

func (s *subscriber) consumeLoop(ctx context.Context, queue string, out chan<- *message.Message) {
	wait := 100 * time.Millisecond
	for !s.stopping(ctx) {
		started := time.Now()
		err := s.consumeOnce(ctx, queue, out)
		if s.stopping(ctx) {
			return
		}
		if time.Since(started) > time.Minute {
			wait = 100 * time.Millisecond
		}
		s.log.Warn("consumer stopped; subscribing again", "queue", queue, "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		case <-s.closing:
		}
		wait = min(2*wait, 10*time.Second)
	}
}

var errNotConnected = errors.New("not connected to the broker")

// consumeOnce declares, consumes and dispatches until the channel dies or
// the subscriber stops.
func (s *subscriber) consumeOnce(ctx context.Context, queue string, out chan<- *message.Message) error {
	dch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	err = s.declare(dch, queue)
	_ = dch.Close()
	if err != nil {
		return err
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer ch.Close() // requeues whatever is still unacked
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		return fmt.Errorf("setting prefetch: %w", err)
	}
	tag := fmt.Sprintf("scourd-%s", watermill.NewShortUUID())
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consuming %s: %w", queue, err)
	}
	s.consuming.Add(1)
	defer s.consuming.Add(-1)

	var pending sync.WaitGroup
	abandon := make(chan struct{}) // in-flight messages are left to the broker
	acks := newAcker(ch, s.prefetch)
	ackerDone := make(chan struct{})
	go func() { defer close(ackerDone); acks.run(abandon) }()
	graceful := false
	defer func() {
		// On shutdown, stop new deliveries and let in-flight messages
		// finish (bounded by the hard stop), then send their acks. When
		// the channel died there is nothing to wait for: its deliveries
		// can no longer be acked and the broker redelivers them.
		if graceful {
			_ = ch.Cancel(tag, false)
			done := make(chan struct{})
			go func() { pending.Wait(); close(done) }()
			select { // not ctx: the router cancels it as soon as it starts closing
			case <-done:
				close(acks.flush)
				<-ackerDone
			case <-s.hardStop.Done():
			}
		}
		close(abandon)
		<-ackerDone
	}()
	msgCtx := s.messageContext(ctx)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("channel closed by the broker or the connection dropped")
			}
			msg := toMessage(d)
			// Added before the handler can run: it calls Done.
			pending.Add(1)
			msg.SetContext(&delivery{Context: msgCtx, tag: d.DeliveryTag, queue: queue,
				acks: acks, abandon: abandon, pending: &pending})
			select {
			case out <- msg:
			case <-ctx.Done():
				pending.Done()
				graceful = true
				return nil
			}
		case <-ctx.Done():
			graceful = true
			return nil
		case <-s.closing:
			graceful = true
			return nil
		}
	}
}

// delivery is the context of a message from the subscriber: it carries what
// settling the message needs, so that no goroutine per delivery has to wait
// for the router's verdict (that waiter, a select on the message's Acked
// and Nacked channels, cost about a tenth of scourd's CPU per notification
// in bench-ingest's profile).
type delivery struct {
	context.Context
	tag     uint64
	queue   string
	acks    *acker
	abandon <-chan struct{}
	pending *sync.WaitGroup
	done    atomic.Bool
}

type deliveryKey struct{}

func (d *delivery) Value(key any) any {
	if key == (deliveryKey{}) {
		return d
	}
	return d.Context.Value(key)
}

// settle hands the verdict on d's message to its channel's acker, once.
func (s *subscriber) settle(d *delivery, msg *message.Message, ack bool) {
	if d.done.Swap(true) {
		return
	}
	defer d.pending.Done()
	select {
	case <-d.abandon: // the channel is gone: the broker redelivers it
		return
	default:
	}
	select {
	case d.acks.settled <- settlement{tag: d.tag, ack: ack}:
		if s.settled != nil {
			s.settled(d.queue, msg, ack)
		}
	case <-d.abandon: // the channel is gone: the broker redelivers it
	}
}

// middleware must be the router's outermost middleware, and every handler
// on this subscriber's queues a consumer handler (no produced messages):
// the verdict is then the handler chain's error, as watermill's own ack or
// nack after it would be, and it goes to the acker as soon as the chain
// returns. A panic that escapes the chain nacks the message (requeue) and
// goes on to watermill's recovery.
func (s *subscriber) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (out []*message.Message, err error) {
		d, _ := msg.Context().Value(deliveryKey{}).(*delivery)
		if d == nil { // not a delivery of this subscriber
			return h(msg)
		}
		defer s.settle(d, msg, false) // a panic: nack; otherwise a no-op
		out, err = h(msg)
		if len(out) > 0 {
			err = errors.Join(err, errors.New("bus: a handler produced messages; only consumer handlers are supported"))
			out = nil
		}
		s.settle(d, msg, err == nil)
		return out, err
	}
}

// messageContext keeps the values of ctx but is cancelled only by the hard
// stop, so a graceful shutdown lets in-flight handlers finish.
func (s *subscriber) messageContext(ctx context.Context) context.Context {
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(s.hardStop, cancel)
	return mctx
}

// toMessage converts a delivery; header values that are not strings are
// stringified (watermill metadata is string-only, and rejecting them would
// requeue the message forever).
func toMessage(d amqp.Delivery) *message.Message {
	uuid, _ := d.Headers[wamqp.DefaultMessageUUIDHeaderKey].(string)
	if uuid == "" {
		uuid = d.MessageId
	}
	if uuid == "" {
		// oslo sets no message id: name the delivery by its consumer
		// (unique per subscription) and tag, without a crypto/rand read
		uuid = d.ConsumerTag + "-" + strconv.FormatUint(d.DeliveryTag, 10)
	}
	msg := message.NewMessage(uuid, d.Body)
	for k, v := range d.Headers {
		if k == wamqp.DefaultMessageUUIDHeaderKey {
			continue
		}
		if sv, ok := v.(string); ok {
			msg.Metadata[k] = sv
		} else {
			msg.Metadata[k] = fmt.Sprint(v)
		}
	}
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	return msg
}
