package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
)

// cutConnection closes the bus's TCP socket under the AMQP connection: to
// the client this is a network failure (like a broker restart), and it
// touches no other engineer's connection on the shared broker.
// It waits until the bus dialed a new connection and consumes again.
func cutConnection(t *testing.T, b *Bus) {
	t.Helper()
	b.mu.Lock()
	conn := b.conn
	b.mu.Unlock()
	old := conn.Socket()
	if err := old.Close(); err != nil {
		t.Fatalf("closing the socket: %v", err)
	}
	waitFor(t, 60*time.Second, "a new connection", func() bool {
		return conn.Socket() != old && b.Ready() == nil
	})
}

func TestNoLossNoDuplicateAcrossConnectionLoss(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	rec := &Recorder{Max: 10000}
	b, _ := startBus(t, cfg, "compute", rec)
	ch := confirmModeChannel(t, conn)
	const n = 300
	published := make(chan error, 1)
	go func() {
		for i := range n {
			id := uid(fmt.Sprintf("inst-%04d", i))
			if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "versioned_notifications.info",
				sample(t, "versioned/instance-delete-end.json", "msg-"+id, func(d map[string]any) { d["uuid"] = id })); err != nil {
				published <- err
				return
			}
			if i%20 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		published <- nil
	}()
	waitFor(t, 20*time.Second, "first commands", func() bool { return len(rec.Commands()) >= 40 })
	cutConnection(t, b)
	t.Logf("connection cut and re-established after %d commands", len(rec.Commands()))
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	// Cut it again while the backlog drains.
	cutConnection(t, b)
	waitFor(t, 60*time.Second, "all commands", func() bool {
		return len(byInstance(rec.Commands())) == n
	})
	time.Sleep(500 * time.Millisecond)
	for inst, cs := range byInstance(rec.Commands()) {
		if len(cs) != 1 {
			t.Errorf("instance %s handled %d times", inst, len(cs))
		}
	}
	waitFor(t, 30*time.Second, "queues drained", func() bool {
		return queueDepth(t, conn, cfg.NotificationsQueue) == 0 && queueDepth(t, conn, cfg.HostQueue("compute")) == 0
	})
	if p := queueDepth(t, conn, cfg.PoisonQueue); p != 0 {
		t.Errorf("%d messages poisoned", p)
	}
}
