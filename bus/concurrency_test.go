package bus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
)

// gate holds every handler call until released and records how many ran
// at once.
type gate struct {
	mu            sync.Mutex
	running, most int
	handled       int
	release       chan struct{}
}

func (g *gate) Handle(ctx context.Context, c *command.Command) error {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.running--
	g.handled++
	g.mu.Unlock()
	return nil
}

func (g *gate) state() (running, most, handled int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.most, g.handled
}

// bus.handler_concurrency bounds handler calls across consumers and
// batches, whatever the prefetch window lets in, in both modes.
func TestHandlerConcurrencyIsBounded(t *testing.T) {
	for _, mode := range []string{ModeDispatch, ModeDirect} {
		t.Run(mode, func(t *testing.T) {
			conn := testkit.Broker(t)
			cfg := testConfig(t, conn)
			cfg.Mode = mode
			cfg.HandlerConcurrency = 3
			cfg.Prefetch = 16
			key := "versioned_notifications.info"
			if mode == ModeDirect {
				key = "notifications-compute.info"
				cfg.Nova.RoutingKeys = []string{key}
				cfg.NotificationsQueue += "." + HostPlaceholder
			}
			g := &gate{release: make(chan struct{})}
			startBus(t, cfg, "compute", g)
			ch := confirmModeChannel(t, conn)
			const n = 12
			for i := range n {
				id := fmt.Sprintf("m-%d", i)
				body := sample(t, "versioned/instance-delete-end.json", id, func(d map[string]any) { d["uuid"] = uid("i-" + id) })
				if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, key, body); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "3 handler calls running", func() bool { r, _, _ := g.state(); return r >= 3 })
			time.Sleep(300 * time.Millisecond) // room for a fourth call, were the bound broken
			if r, most, _ := g.state(); most != 3 {
				t.Fatalf("%d handler calls ran at once (%d now), want at most handler_concurrency=3", most, r)
			}
			close(g.release)
			waitFor(t, 10*time.Second, "every command handled", func() bool { _, _, h := g.state(); return h == n })
			if _, most, _ := g.state(); most != 3 {
				t.Errorf("%d handler calls ran at once, want at most 3", most)
			}
		})
	}
}
