package bus

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
)

// listings is more than RabbitMQ 4's default delivery limit of a quorum
// queue (20).
const listings = 25

// peekRequeue gets every message of queue and requeues them all, as
// `scourctl poison list` (and the management UI's "Get messages") does:
// each round is one delivery of every message, for the broker's delivery
// limit. It returns how many messages it saw.
func peekRequeue(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var last uint64
	n := 0
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			break
		}
		n, last = n+1, d.DeliveryTag
	}
	if n > 0 {
		if err := ch.Nack(last, true, true); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func publishTo(t *testing.T, conn *amqp.Connection, queue string, bodies ...string) {
	t.Helper()
	ch := confirmModeChannel(t, conn)
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish to %s not confirmed: %v", queue, err)
		}
	}
}

// The poison queue is the operator's only copy of what could not run, and
// the broker counts every look at it (basic.get, then requeue) as a
// delivery. RabbitMQ 4 drops a message of a quorum queue declared without
// x-delivery-limit after 20 of them; scour's poison and unroutable queues
// carry a limit no listing reaches, so the messages stay.
func TestPoisonQueueKeepsMessagesThroughListings(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	startBus(t, cfg, "compute", &Recorder{})
	publishTo(t, conn, cfg.PoisonQueue, "one", "two", "three")
	for i := 1; i <= listings; i++ {
		if n := peekRequeue(t, conn, cfg.PoisonQueue); n != 3 {
			t.Fatalf("listing %d saw %d poison messages, want 3: the broker dropped them (broker %s)", i, n, brokerVersion(conn))
		}
	}
	// Both keep queues carry the limit: the broker refuses them without it.
	for _, q := range []string{cfg.PoisonQueue, cfg.UnroutableQueue()} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		if err == nil || !strings.Contains(err.Error(), "inequivalent arg 'x-delivery-limit'") {
			t.Errorf("redeclaring %s without x-delivery-limit: %v, want the broker to refuse it (the queue has a limit)", q, err)
		}
		if err == nil {
			ch.Close()
		}
	}
}

// A deployment whose poison and unroutable queues an earlier scour
// declared (quorum, no x-delivery-limit) keeps working: the broker
// refuses any change of x-delivery-limit on an existing queue, so scourd
// declares them in their old form, keeps their messages, and tells the
// operator to raise the limit by policy (a WARN on RabbitMQ 4, which
// drops them after 20 deliveries; INFO on 3.x).
func TestLegacyKeepQueuesAreKept(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{cfg.PoisonQueue, cfg.UnroutableQueue()} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
			t.Fatal(err)
		}
	}
	ch.Close()
	publishTo(t, conn, cfg.PoisonQueue, "from before the upgrade")

	var logs testkit.SyncBuffer
	b, err := New(cfg, "compute", &Recorder{}, metrics.New(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	runBus(t, b)
	if n := queueDepth(t, conn, cfg.PoisonQueue); n != 1 {
		t.Errorf("the legacy poison queue holds %d messages, want 1", n)
	}
	level := "level=WARN"
	if m := broker.MajorVersion(brokerVersion(conn)); m > 0 && m < 4 {
		level = "level=INFO"
	}
	for _, q := range []string{cfg.PoisonQueue, cfg.UnroutableQueue()} {
		waitFor(t, 5*time.Second, "the legacy note for "+q, func() bool {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "without a delivery limit") && strings.Contains(line, "queue="+q+" ") && strings.Contains(line, level) {
					return true
				}
			}
			return false
		})
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs.String())
	}
}

func brokerVersion(conn *amqp.Connection) string { return broker.ServerVersion(conn) }
