package broker

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
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// MetadataRedelivered is set to "true" on a message the broker delivered
// before (its ack was lost, or it was requeued).
const MetadataRedelivered = "x-scour-redelivered"

// Subscriber is a watermill subscriber on RabbitMQ queues, with watermill's
// ack contract: each delivery becomes a message on the subscription's
// channel, and is acked on the broker when the router acks the message,
// nacked with requeue when it nacks it. Every delivery the prefetch window
// allows is handed over at once (the router runs each handler in a
// goroutine of its own), so handlers waiting for a publisher confirm do
// not hold up the ones behind them. watermill-amqp's subscriber hands the
// router one message per subscription at a time.
//
// Each (re)subscription first runs Declare for the queue on a channel of
// its own, so after a broker restart the exchanges, queues and bindings
// exist again; a dead channel or connection is re-subscribed with backoff.
//
// Close is graceful: the consumers are cancelled so no new deliveries
// arrive, in-flight messages get up to ShutdownTimeout to be settled
// (their contexts are not cancelled before that), then the channels are
// closed and the broker requeues whatever is still unacked.
type Subscriber struct {
	conn *Conn
	cfg  SubscriberConfig
	log  *slog.Logger

	closing   chan struct{}
	closeOnce sync.Once
	hardStop  context.Context // cancelled ShutdownTimeout after Close
	stopHard  context.CancelFunc
	wg        sync.WaitGroup
	consuming atomic.Int32 // subscriptions with a live consumer
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	Prefetch        int
	ShutdownTimeout time.Duration
	// Declare declares queue and what it needs, before each
	// (re)subscription.
	Declare func(ch *amqp.Channel, queue string) error
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber on conn.
func NewSubscriber(conn *Conn, cfg SubscriberConfig, log *slog.Logger) *Subscriber {
	hard, stop := context.WithCancel(context.Background())
	return &Subscriber{conn: conn, cfg: cfg, log: log, closing: make(chan struct{}), hardStop: hard, stopHard: stop}
}

// Consuming is the number of subscriptions with a live consumer.
func (s *Subscriber) Consuming() int { return int(s.consuming.Load()) }

// Subscribe consumes queue until ctx ends or Close; the channel closes then.
func (s *Subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
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
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		t := time.AfterFunc(s.cfg.ShutdownTimeout, s.stopHard)
		s.wg.Wait()
		t.Stop()
		s.stopHard()
	})
	return nil
}

func (s *Subscriber) stopping(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-s.closing:
		return true
	default:
		return false
	}
}

// consumeLoop (re)subscribes until the subscriber stops. A consumer that
// was lost logs one WARN; the failed attempts that follow (the broker
// still down, a declare refused) are a series: each is counted
// (RetryCounter op "resubscribe") and logged at DEBUG, the first one also
// at WARN with its error, and the series ends with one WARN that gives its
// count when consuming works again.
func (s *Subscriber) consumeLoop(ctx context.Context, queue string, out chan<- *message.Message) {
	wait := 100 * time.Millisecond
	failed := 0 // failed subscription attempts of the current series
	for !s.stopping(ctx) {
		started := time.Now()
		consumed := false
		err := s.consumeOnce(ctx, queue, out, func() {
			consumed = true
			if failed > 0 {
				s.log.Warn("consuming again after failed attempts", "queue", queue, "failed_attempts", failed)
			}
			failed = 0
		})
		if s.stopping(ctx) {
			return
		}
		if time.Since(started) > time.Minute {
			wait = 100 * time.Millisecond
		}
		switch {
		case consumed:
			s.log.Warn("consumer stopped; subscribing again", "queue", queue, "err", err, "in", wait)
		default:
			failed++
			s.conn.retries.BrokerRetry("resubscribe")
			if failed == 1 {
				s.log.Warn("cannot subscribe; retrying until it works (one line when it does)", "queue", queue, "err", err, "in", wait)
			} else {
				s.log.Debug("cannot subscribe, retrying", "queue", queue, "err", err, "in", wait, "attempt", failed)
			}
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		case <-s.closing:
		}
		wait = min(2*wait, 10*time.Second)
	}
}

var errNotConnected = errors.New("not connected to the broker")

// consumeOnce declares, consumes and hands deliveries over until the
// channel dies or the subscriber stops. consuming is called once the
// consumer is registered.
func (s *Subscriber) consumeOnce(ctx context.Context, queue string, out chan<- *message.Message, consuming func()) error {
	dch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	err = s.cfg.Declare(dch, queue)
	_ = dch.Close()
	if err != nil {
		return err
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer ch.Close() // requeues whatever is still unacked
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("setting prefetch: %w", err)
	}
	tag := "scourd-" + watermill.NewShortUUID()
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consuming %s: %w", queue, err)
	}
	s.consuming.Add(1)
	defer s.consuming.Add(-1)
	consuming()

	var pending sync.WaitGroup
	graceful := func() error {
		// Stop new deliveries; let in-flight messages be settled (bounded
		// by the hard stop), then close the channel.
		_ = ch.Cancel(tag, false)
		done := make(chan struct{})
		go func() { pending.Wait(); close(done) }()
		select { // not ctx: the router cancels it as soon as it starts closing
		case <-done:
		case <-s.hardStop.Done():
		}
		return nil
	}
	msgCtx := s.messageContext(ctx)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("channel closed by the broker or the connection dropped")
			}
			msg := toMessage(d)
			mctx, settled := context.WithCancel(msgCtx)
			msg.SetContext(mctx)
			select {
			case out <- msg:
			case <-ctx.Done():
				settled()
				_ = d.Nack(false, true)
				return graceful()
			case <-s.closing: // nobody may be reading out any more
				settled()
				_ = d.Nack(false, true)
				return graceful()
			}
			pending.Add(1)
			go s.settle(d, msg, settled, &pending)
		case <-ctx.Done():
			return graceful()
		case <-s.closing:
			return graceful()
		}
	}
}

// settle acks or nacks d with the router's verdict on msg, then ends the
// message's context (watermill's contract: a settled message's context is
// done). A channel that died meanwhile fails the ack: the broker
// redelivers the message.
func (s *Subscriber) settle(d amqp.Delivery, msg *message.Message, settled context.CancelFunc, pending *sync.WaitGroup) {
	defer pending.Done()
	defer settled()
	select {
	case <-msg.Acked():
		_ = d.Ack(false)
	case <-msg.Nacked():
		_ = d.Nack(false, true)
	case <-s.hardStop.Done(): // left to the broker, which requeues it
	}
}

// messageContext keeps the values of ctx but is cancelled only by the hard
// stop, so a graceful shutdown lets in-flight handlers finish (each
// message's context, derived from it, also ends once it is settled).
func (s *Subscriber) messageContext(ctx context.Context) context.Context {
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(s.hardStop, cancel)
	return mctx
}

// toMessage converts a delivery; header values that are not strings are
// stringified (watermill metadata is string-only, and rejecting them would
// requeue the message forever).
func toMessage(d amqp.Delivery) *message.Message {
	uuid := d.MessageId
	if uuid == "" { // oslo sets no message id: name the delivery by its consumer and tag
		uuid = d.ConsumerTag + "-" + strconv.FormatUint(d.DeliveryTag, 10)
	}
	msg := message.NewMessage(uuid, d.Body)
	for k, v := range d.Headers {
		if sv, ok := v.(string); ok {
			msg.Metadata[k] = sv
		} else {
			msg.Metadata[k] = fmt.Sprint(v)
		}
	}
	if d.Redelivered {
		msg.Metadata.Set(MetadataRedelivered, "true")
	}
	return msg
}
