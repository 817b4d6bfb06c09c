package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"

	"github.com/scour-project/scour/internal/testkit"
)

// A queue that cannot be subscribed (here: its declare is refused three
// times) is retried on the real broker: each failed attempt is counted as
// "resubscribe", the series logs one WARN when it starts and one with its
// count when consuming works, the attempts in between at debug level; and
// a message published meanwhile is then delivered.
func TestSubscribeRetriesCountedAndWarnedOnce(t *testing.T) {
	testkit.Broker(t)
	dial := func() (*amqp.Connection, error) { return amqp.Dial(testkit.BrokerURL()) }
	backoff := func() retry.Backoff { return retry.NewConstant(20 * time.Millisecond) }
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	retries := &countRetries{}
	k, err := openConn(dial, backoff, log, retries)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	queue := "scour.test.resubscribe." + watermill.NewShortUUID()
	var declares atomic.Int32
	sub := NewSubscriber(k, SubscriberConfig{Prefetch: 4, ShutdownTimeout: time.Second,
		Declare: func(ch *amqp.Channel, q string) error {
			if declares.Add(1) <= 3 {
				return errors.New("declare refused (test)")
			}
			_, err := ch.QueueDeclare(q, false, true, false, false, nil)
			return err
		}}, log)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "a live consumer", func() bool { return sub.Consuming() == 1 })

	ch, err := k.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if string(m.Payload) != "hello" {
			t.Fatalf("payload %q", m.Payload)
		}
		m.Ack()
	case <-ctx.Done():
		t.Fatal("no delivery after the subscription recovered")
	}

	if n := retries.get("resubscribe"); n != 3 {
		t.Errorf("counted %d resubscribe retries, want 3", n)
	}
	out := logs.String()
	if w := strings.Count(out, "level=WARN"); w != 2 {
		t.Errorf("%d WARN lines for one series of 3 failed attempts, want 2 (start, end with count):\n%s", w, out)
	}
	if !strings.Contains(out, `msg="cannot subscribe; retrying until it works (one line when it does)"`) ||
		!strings.Contains(out, "declare refused (test)") ||
		!strings.Contains(out, `msg="consuming again after failed attempts" queue=`+queue+` failed_attempts=3`) {
		t.Errorf("want the series' first WARN with its error and the closing WARN with the count:\n%s", out)
	}
	if d := strings.Count(out, `level=DEBUG msg="cannot subscribe, retrying"`); d != 2 {
		t.Errorf("%d DEBUG lines, want 2:\n%s", d, out)
	}
}

// testQueueArgs make a test's queue what scourd's bus declares (durable,
// quorum), expiring when unused so the shared broker keeps no test queues.
var testQueueArgs = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-expires": int64(2 * time.Minute / time.Millisecond)}

// queueSubscriber subscribes a Subscriber (shutdown: its ShutdownTimeout)
// to queue ("": a fresh one), and returns it with a publisher to it.
func queueSubscriber(t *testing.T, shutdown time.Duration, queue string) (*Subscriber, <-chan *message.Message, *Publisher, string) {
	t.Helper()
	testkit.Broker(t)
	k, err := Connect(context.Background(), Options{URL: testkit.BrokerURL()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	if queue == "" {
		queue = "scour.test.sub." + watermill.NewShortUUID()
	}
	declare := func(ch *amqp.Channel, q string) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, testQueueArgs)
		return err
	}
	sub := NewSubscriber(k, SubscriberConfig{Prefetch: 16, ShutdownTimeout: shutdown, Declare: declare}, testLogger(t))
	t.Cleanup(func() { sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "a live consumer", func() bool { return sub.Consuming() == 1 })
	pub := NewPublisher(k, "")
	t.Cleanup(func() { pub.Close() })
	return sub, msgs, pub, queue
}

func publishN(t *testing.T, pub *Publisher, queue string, n int) {
	t.Helper()
	for i := range n {
		if err := pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte{byte('a' + i)})); err != nil {
			t.Fatal(err)
		}
	}
}

// receive returns the next message; the 15 s only catch one that never
// comes.
func receive(t *testing.T, msgs <-chan *message.Message, what string) *message.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s", what)
		return nil
	}
}

// Departure 1 from watermill's contract (doc.go): the subscriber hands
// over the next delivery while the previous one is not acked yet, the
// opposite of watermill's TestNoAck, which TestWatermillPubSub skips.
func TestSubscriberHandsOverBeforeAck(t *testing.T) {
	_, msgs, pub, queue := queueSubscriber(t, time.Second, "")
	publishN(t, pub, queue, 2)
	first := receive(t, msgs, "first message")
	second := receive(t, msgs, "second message while the first is not acked")
	if first.UUID == second.UUID {
		t.Fatalf("the same message %s twice", first.UUID)
	}
	first.Ack()
	second.Ack()
}

// A message's context ends once the message is settled, as watermill's
// contract has it (its TestMessageCtx), and not before.
func TestMessageContextEndsWhenSettled(t *testing.T) {
	_, msgs, pub, queue := queueSubscriber(t, time.Minute, "")
	publishN(t, pub, queue, 2)
	for _, settle := range []func(*message.Message) bool{(*message.Message).Ack, (*message.Message).Nack} {
		m := receive(t, msgs, "message")
		if err := m.Context().Err(); err != nil {
			t.Fatalf("context of an unsettled message already ended: %v", err)
		}
		settle(m)
		select {
		case <-m.Context().Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the context of a settled message did not end")
		}
	}
}

// Close returns while nobody reads the subscription any more and the
// prefetch window holds deliveries not handed over; they are requeued
// for the next subscriber, not lost. (Close used to block for good in
// the hand-over; watermill's TestContinueAfterSubscribeClose found it.)
func TestCloseWhileNobodyReads(t *testing.T) {
	sub, msgs, pub, queue := queueSubscriber(t, time.Second, "")
	publishN(t, pub, queue, 3)
	receive(t, msgs, "first message").Ack()
	closed := make(chan struct{})
	go func() { sub.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked: a delivery waits to be handed over to a subscription nobody reads")
	}
	_, msgs, _, _ = queueSubscriber(t, time.Second, queue)
	got := map[string]bool{}
	for range 2 {
		m := receive(t, msgs, "requeued message")
		got[string(m.Payload)] = true
		m.Ack()
	}
	if !got["b"] || !got["c"] {
		t.Fatalf("after Close, the next subscriber got %v; want b and c", got)
	}
}

// Departure 4 (doc.go): headers that are not strings become metadata
// strings, a redelivery is marked, and a delivery without a message id
// (oslo's) is named by its consumer and delivery tag.
func TestToMessageMetadata(t *testing.T) {
	m := toMessage(amqp.Delivery{ConsumerTag: "scourd-x", DeliveryTag: 7, Redelivered: true, Body: []byte("{}"),
		Headers: amqp.Table{"s": "v", "n": int32(5), "b": true}})
	if m.UUID != "scourd-x-7" || m.Metadata.Get("s") != "v" || m.Metadata.Get("n") != "5" || m.Metadata.Get("b") != "true" ||
		m.Metadata.Get(MetadataRedelivered) != "true" {
		t.Fatalf("message %s metadata %v", m.UUID, m.Metadata)
	}
	if m := toMessage(amqp.Delivery{MessageId: "id-1"}); m.UUID != "id-1" || m.Metadata.Get(MetadataRedelivered) != "" {
		t.Fatalf("message %s metadata %v", m.UUID, m.Metadata)
	}
}
