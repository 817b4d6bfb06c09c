package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"

	"github.com/scour-project/scour/internal/testkit"
)

// countRetries is a RetryCounter for tests.
type countRetries struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countRetries) BrokerRetry(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[op]++
}

func (c *countRetries) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// conn re-dials after the connection drops, hands out channels on the new
// one, and after Close neither reconnects nor hands out channels. The
// failed re-dials are counted, and the outage logs one WARN with their
// count instead of one per attempt.
func TestConnReconnectsUntilClosed(t *testing.T) {
	testkit.Broker(t)
	var dials atomic.Int32
	var mu sync.Mutex
	var last *amqp.Connection
	dial := func() (*amqp.Connection, error) {
		dials.Add(1)
		if n := dials.Load(); n == 2 || n == 3 { // the first two re-dials fail: backoff, then again
			return nil, errors.New("broker restarting")
		}
		c, err := amqp.Dial(testkit.BrokerURL())
		mu.Lock()
		last = c
		mu.Unlock()
		return c, err
	}
	backoff := func() retry.Backoff { return retry.NewConstant(20 * time.Millisecond) }
	var logs testkit.SyncBuffer
	retries := &countRetries{}
	k, err := openConn(dial, backoff, slog.New(slog.NewTextHandler(&logs, nil)), retries)
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := k.Channel(); err != nil {
		t.Fatalf("first channel: %v", err)
	} else {
		ch.Close()
	}
	mu.Lock()
	first := last
	mu.Unlock()
	first.Close() // the connection drops
	testkit.WaitFor(t, 10*time.Second, "a new connection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return dials.Load() >= 4 && last != first && k.IsConnected()
	})
	if n := retries.get("reconnect"); n != 2 {
		t.Errorf("counted %d reconnect retries, want 2", n)
	}
	out := logs.String()
	if strings.Count(out, "level=WARN") != 2 || !strings.Contains(out, `msg="reconnected to the broker after failed attempts" failed_attempts=2`) {
		t.Errorf("want the connection-lost WARN and one WARN with the count, got:\n%s", out)
	}
	ch, err := k.Channel()
	if err != nil {
		t.Fatalf("channel after reconnecting: %v", err)
	}
	ch.Close()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if k.IsConnected() {
		t.Error("connected after Close")
	}
	if _, err := k.Channel(); !errors.Is(err, errNotConnected) {
		t.Errorf("Channel after Close: %v, want errNotConnected", err)
	}
	n := dials.Load()
	time.Sleep(200 * time.Millisecond)
	if dials.Load() != n {
		t.Errorf("dialled %d more times after Close", dials.Load()-n)
	}
}

// Connect to a broker that is not there: every failed dial is counted,
// the first is logged at WARN and the rest at debug, and the error names
// the count.
func TestConnectRetriesCountedAndWarnedOnce(t *testing.T) {
	var logs testkit.SyncBuffer
	retries := &countRetries{}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	// Port 1 on loopback: nothing listens, the dial is refused at once.
	_, err := Connect(ctx, Options{URL: "amqp://guest:guest@127.0.0.1:1/", Retries: retries},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err == nil {
		t.Fatal("connected to nothing")
	}
	n := retries.get("connect")
	if n < 2 {
		t.Fatalf("counted %d connect retries in 1.5 s, want at least 2 (backoff starts at 0.5 s)", n)
	}
	out := logs.String()
	if w := strings.Count(out, "level=WARN"); w != 1 {
		t.Errorf("%d WARN lines for one series of %d failed attempts, want 1:\n%s", w, n, out)
	}
	if d := strings.Count(out, `level=DEBUG msg="broker not reachable`); d != n-1 {
		t.Errorf("%d DEBUG lines, want %d:\n%s", d, n-1, out)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("(%d failed attempts)", n)) {
		t.Errorf("error %q does not name the %d failed attempts", err, n)
	}
}
