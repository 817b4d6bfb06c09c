package bus

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
)

// A command for a host whose queue nobody declared (its scourd never
// started, or its `host` differs from Nova's name for it) is not silently
// dropped by the broker: the command exchange's alternate exchange puts it
// in the poison queue.
func TestCommandForUnknownHostLandsInPoisonQueue(t *testing.T) {
	conn := needBroker(t)
	cfg := testConfig(t, conn)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(cfg.UnroutableExchange(), false, false)
			ch.Close()
		}
	})
	compute := &Recorder{}
	startBus(t, cfg, "compute", compute)

	ch := confirmModeChannel(t, conn)
	ctx := context.Background()
	pub := func(uuid, host string) {
		t.Helper()
		if err := PublishOslo(ctx, ch, cfg.Nova.Exchange, "versioned_notifications.info",
			sample(t, "versioned/instance-delete-end.json", "m-"+uuid, func(d map[string]any) { d["uuid"], d["host"] = uuid, host })); err != nil {
			t.Fatal(err)
		}
	}
	pub("i-known", "compute")
	pub("i-unknown", "compute-nobody-runs")

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
	if c.InstanceUUID != "i-unknown" || c.Host != "compute-nobody-runs" {
		t.Errorf("poisoned command %+v, want the one for compute-nobody-runs", c)
	}
	if n := queueDepth(t, conn, cfg.NotificationsQueue); n != 0 {
		t.Errorf("notifications queue holds %d messages: the notification must be acked", n)
	}
}
