package bus

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
)

// A command for a host whose queue nobody declared (its scourd never
// started, or its `host` differs from Nova's name for it) is not silently
// dropped by the broker: the command exchange's alternate exchange puts it
// in the poison queue, with reason "unroutable".
func TestCommandForUnknownHostLandsInPoisonQueue(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	compute := &Recorder{}
	startBus(t, cfg, "compute", compute)

	ch := confirmModeChannel(t, conn)
	ctx := context.Background()
	pub := func(uuid, host string) {
		t.Helper()
		if err := oslo.Publish(ctx, ch, cfg.Nova.Exchange, "versioned_notifications.info",
			sample(t, "versioned/instance-delete-end.json", "m-"+uuid, func(d map[string]any) { d["uuid"], d["host"] = uuid, host })); err != nil {
			t.Fatal(err)
		}
	}
	pub(uid("i-known"), "compute")
	pub(uid("i-unknown"), "compute-nobody-runs")

	waitFor(t, 20*time.Second, "the known host's command", func() bool { return len(compute.Commands()) >= 1 })
	waitFor(t, 10*time.Second, "the unroutable command in the poison queue", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) >= 1 })
	msgs := getAll(t, conn, cfg.PoisonQueue)
	if len(msgs) != 1 {
		t.Fatalf("poison queue holds %d messages, want 1", len(msgs))
	}
	var c command.Command
	if err := json.Unmarshal(msgs[0].Body, &c); err != nil {
		t.Fatalf("poisoned message is not a command: %v: %s", err, msgs[0].Body)
	}
	if c.InstanceUUID != uid("i-unknown") || c.Host != "compute-nobody-runs" {
		t.Errorf("poisoned command %+v, want the one for compute-nobody-runs", c)
	}
	if r := msgs[0].Headers[HeaderPoisonReason]; r != "unroutable" {
		t.Errorf("poisoned command has reason %v, want unroutable (headers %v)", r, msgs[0].Headers)
	}
	if n := queueDepth(t, conn, cfg.NotificationsQueue); n != 0 {
		t.Errorf("notifications queue holds %d messages: the notification must be acked", n)
	}
}

// alwaysDown fails every command transiently (Placement down for good).
type alwaysDown struct{ calls atomic.Int64 }

func (a *alwaysDown) Handle(ctx context.Context, c *command.Command) error {
	a.calls.Add(1)
	return errors.New("placement unreachable")
}

// A command whose handler keeps failing transiently is requeued until the
// quorum queue's delivery limit, then dead-lettered to the poison queue:
// neither an endless loop nor (RabbitMQ 4's default) silently dropped.
func TestDeliveryLimitDeadLettersToPoison(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.DeliveryLimit = 2
	h := &alwaysDown{}
	startBus(t, cfg, "compute", h)
	ch := confirmModeChannel(t, conn)
	if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "versioned_notifications.info",
		sample(t, "versioned/instance-delete-end.json", "m-down", func(d map[string]any) { d["uuid"] = uid("i-down") })); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the command dead-lettered to the poison queue", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) >= 1 })
	msgs := getAll(t, conn, cfg.PoisonQueue)
	var c command.Command
	if len(msgs) != 1 || json.Unmarshal(msgs[0].Body, &c) != nil || c.InstanceUUID != uid("i-down") {
		t.Fatalf("poison queue: %d messages, first %q; want the i-down command", len(msgs), firstBody(msgs))
	}
	if r := msgs[0].Headers[HeaderPoisonReason]; r != "delivery_limit" {
		t.Errorf("dead-lettered command has reason %v, want delivery_limit (headers %v)", r, msgs[0].Headers)
	}
	if n := queueDepth(t, conn, cfg.HostQueue("compute")); n != 0 {
		t.Errorf("host queue still holds %d messages", n)
	}
	if got := h.calls.Load(); got < int64(cfg.Retry.Attempts)*2 {
		t.Errorf("handler called %d times, want at least %d (retries in process, then redeliveries)", got, cfg.Retry.Attempts*2)
	}
}

func firstBody(msgs []amqp.Delivery) string {
	if len(msgs) == 0 {
		return ""
	}
	return string(msgs[0].Body)
}

// Direct mode dead-letters its notifications queue to the unroutable
// exchange too; a notification requeued past the delivery limit (claims
// database or Placement down for an hour) must end in the poison queue with
// its reason, not sit unconsumed in the unroutable queue, unseen by
// `scourctl poison list` and the poison metric.
func TestDirectModeDeliveryLimitDeadLettersToPoison(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.Mode = ModeDirect
	cfg.NotificationsQueue += "." + HostPlaceholder
	cfg.Nova.RoutingKeys = []string{"notifications-compute.info"}
	cfg.DeliveryLimit = 1
	h := &alwaysDown{}
	b, m := startBus(t, cfg, "compute", h)
	ch := confirmModeChannel(t, conn)
	if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "notifications-compute.info",
		sample(t, "versioned/instance-delete-end.json", "m-direct-down", func(d map[string]any) { d["uuid"] = uid("i-direct-down") })); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the notification dead-lettered to the poison queue", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) >= 1 })
	msgs := getAll(t, conn, cfg.PoisonQueue)
	if len(msgs) != 1 || !strings.Contains(string(msgs[0].Body), uid("i-direct-down")) {
		t.Fatalf("poison queue: %d messages, first %q; want the i-direct-down notification", len(msgs), firstBody(msgs))
	}
	if r := msgs[0].Headers[HeaderPoisonReason]; r != "delivery_limit" {
		t.Errorf("dead-lettered notification has reason %v, want delivery_limit (headers %v)", r, msgs[0].Headers)
	}
	for _, q := range []string{b.NotificationsQueue(), cfg.UnroutableQueue()} {
		if n := queueDepth(t, conn, q); n != 0 {
			t.Errorf("%s still holds %d messages", q, n)
		}
	}
	waitFor(t, 10*time.Second, "the poisoned notification counted", func() bool { return poisonedCount(t, m, "delivery_limit") == 1 })
}
