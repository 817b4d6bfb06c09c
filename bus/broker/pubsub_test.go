package broker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/internal/testkit"
)

// pubsubFeatures is what bus/broker's Publisher and Subscriber promise,
// for watermill's own pub/sub suite (see doc.go for the departures).
var pubsubFeatures = tests.Features{
	// A consumer group is a queue of its own bound to the topic's routing
	// key: every group gets every message, a group's members share them.
	ConsumerGroups: true,
	// At-least-once: an ack lost with its channel redelivers the message
	// (scour's bus drops the duplicates, bus/dedupe.go).
	ExactlyOnceDelivery: false,
	// Departure 1 (doc.go): every delivery the prefetch window allows is
	// handed over at once, without waiting for the previous one's ack,
	// and a nack requeues; so no order, not even with one subscriber.
	// This skips TestNoAck and TestPublishSubscribeInOrder; their
	// opposite is TestSubscriberHandsOverBeforeAck.
	GuaranteedOrder:                     false,
	GuaranteedOrderWithSingleSubscriber: false,
	// Durable queues and persistent messages.
	Persistent: true,
	// Not set: restarting the RabbitMQ that every test on this machine
	// shares would fail the others. Reconnects are tested by dropping
	// the connection instead: TestConnReconnectsUntilClosed here and
	// bus's TestNoLossNoDuplicateAcrossConnectionLoss. This skips
	// TestReconnect.
	RestartServiceCommand: nil,
	// A queue: a message acked by one subscriber is gone for the next
	// (skips TestNewSubscriberReceivesOldMessages).
	NewSubscriberReceivesOldMessages: false,
	// AMQP carries no Go context: the published message's is not the
	// consumed one's.
	ContextPreserved: false,
	// The full message counts (10,000 confirmed publishes of quorum-queue
	// messages, 50 concurrent subscribers) take about 13 s; make test runs
	// the suite a second time under -race (make race-short), where the
	// short counts (100, 10) keep it to seconds.
	ForceShort: raceEnabled,
}

// TestWatermillPubSub runs watermill's pub/sub test suite on the real
// broker, with quorum queues as scourd declares them (bus.classic_queues
// false), through a direct exchange of the test's own. A topic's queue is
// declared by SubscribeInitialize before the suite publishes to it, as
// scourd's bus declares its topology before publishing.
func TestWatermillPubSub(t *testing.T) {
	testkit.Broker(t)
	k, err := Connect(context.Background(), Options{URL: testkit.BrokerURL()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	exchange := "scour.test.watermill." + watermill.NewShortUUID()
	ch, err := k.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	t.Cleanup(func() {
		if ch, err := k.Channel(); err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
			ch.Close()
		}
	})
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		return NewPublisher(k, exchange), newSuiteSubscriber(k, exchange, group, testLogger(t))
	}
	tests.TestPubSub(t, pubsubFeatures,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "") },
		newPubSub)
}

// suiteSubscriber is a Subscriber on the queue of a topic (or of a
// consumer group's share of it), bound to the test's exchange.
type suiteSubscriber struct {
	*Subscriber
	k        *Conn
	exchange string
	group    string
}

func newSuiteSubscriber(k *Conn, exchange, group string, log *slog.Logger) *suiteSubscriber {
	s := &suiteSubscriber{k: k, exchange: exchange, group: group}
	s.Subscriber = NewSubscriber(k, SubscriberConfig{Prefetch: 128, ShutdownTimeout: time.Second, Declare: s.declare}, log)
	return s
}

func (s *suiteSubscriber) queue(topic string) string {
	if s.group == "" {
		return topic
	}
	return s.group + "." + topic
}

// declare declares queue (testQueueArgs) and binds it to its topic on the
// exchange.
func (s *suiteSubscriber) declare(ch *amqp.Channel, queue string) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, testQueueArgs); err != nil {
		return err
	}
	return ch.QueueBind(queue, strings.TrimPrefix(queue, s.queue("")), s.exchange, false, nil)
}

func (s *suiteSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return s.Subscriber.Subscribe(ctx, s.queue(topic))
}

// SubscribeInitialize declares the topic's queue, so that what is
// published before the first Subscribe is kept.
func (s *suiteSubscriber) SubscribeInitialize(topic string) error {
	ch, err := s.k.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return s.declare(ch, s.queue(topic))
}

var _ message.SubscribeInitializer = (*suiteSubscriber)(nil)
