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
