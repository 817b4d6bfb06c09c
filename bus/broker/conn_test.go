package broker

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"

	"github.com/scour-project/scour/internal/testkit"
)

// conn re-dials after the connection drops, hands out channels on the new
// one, and after Close neither reconnects nor hands out channels.
func TestConnReconnectsUntilClosed(t *testing.T) {
	testkit.Broker(t)
	var dials atomic.Int32
	var mu sync.Mutex
	var last *amqp.Connection
	dial := func() (*amqp.Connection, error) {
		dials.Add(1)
		if dials.Load() == 2 { // the first re-dial fails: backoff, then again
			return nil, errors.New("broker restarting")
		}
		c, err := amqp.Dial(testkit.BrokerURL())
		mu.Lock()
		last = c
		mu.Unlock()
		return c, err
	}
	backoff := func() retry.Backoff { return retry.NewConstant(20 * time.Millisecond) }
	k, err := openConn(dial, backoff, testLogger(t))
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
		return dials.Load() >= 3 && last != first && k.IsConnected()
	})
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
