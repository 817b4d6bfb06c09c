package bus

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
)

// Direct mode: a per-host notification topic, no dispatch hop, no scour
// exchange; commands for other hosts are ignored.
func TestDirectMode(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.Mode = ModeDirect
	cfg.Nova.RoutingKeys = []string{"notifications-compute.info"}
	cfg.NotificationsQueue = "scour.notifications" // the default: becomes per-host
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete("scour.notifications.compute", false, false, false)
			ch.Close()
		}
	})
	rec := &Recorder{}
	b, _ := startBus(t, cfg, "compute", rec)
	if b.NotificationsQueue() != "scour.notifications.compute" {
		t.Fatalf("direct-mode queue %q", b.NotificationsQueue())
	}
	ch := confirmModeChannel(t, conn)
	ctx := context.Background()
	pub := func(inner []byte) {
		if err := oslo.Publish(ctx, ch, cfg.Nova.Exchange, "notifications-compute.info", inner); err != nil {
			t.Fatal(err)
		}
	}
	pub(sample(t, "versioned/instance-live_migration_post_dest-end.json", "m-other", func(d map[string]any) { d["uuid"] = uid("i-other") })) // host2
	pub(sample(t, "versioned/instance-delete-end.json", "m-mine", func(d map[string]any) { d["uuid"] = uid("i-mine") }))
	pub(sample(t, "versioned/instance-resize_revert-end.json", "m-revert", func(d map[string]any) { d["uuid"] = uid("i-revert") }))
	waitFor(t, 10*time.Second, "two commands", func() bool { return len(rec.Commands()) == 2 })
	time.Sleep(200 * time.Millisecond)
	got := byInstance(rec.Commands())
	if len(got[uid("i-mine")]) != 1 || len(got[uid("i-revert")]) != 1 || len(got[uid("i-other")]) != 0 {
		t.Errorf("direct mode handled %v", got)
	}
	dch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer dch.Close()
	if err := dch.ExchangeDeclarePassive(cfg.Exchange, "topic", true, false, false, false, nil); err == nil {
		t.Errorf("direct mode declared scour's exchange %s", cfg.Exchange)
	}
}

// On shutdown a message being handled may finish (within shutdown_timeout)
// and is acked, not redelivered.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	started := make(chan struct{}, 1)
	var finished atomic.Bool
	h := HandlerFunc(func(ctx context.Context, c *command.Command) error {
		started <- struct{}{}
		select {
		case <-time.After(500 * time.Millisecond):
			finished.Store(true)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	b, err := New(cfg, "compute", h, metrics.New(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	waitFor(t, 20*time.Second, "ready", func() bool { return b.Ready() == nil })
	ch := confirmModeChannel(t, conn)
	if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "versioned_notifications.info",
		sample(t, "versioned/instance-delete-end.json", "m-slow", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	cancel() // SIGTERM while the handler runs
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	if !finished.Load() {
		t.Fatal("in-flight handler was cut short")
	}
	for _, q := range []string{cfg.NotificationsQueue, cfg.HostQueue("compute")} {
		if n := queueDepth(t, conn, q); n != 0 {
			t.Errorf("%s holds %d messages after a graceful stop: the finished message was not acked", q, n)
		}
	}
}
