package bus

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"
)

// conn is scourd's broker connection: it re-dials with capped, jittered
// backoff whenever the connection drops, until Close. Subscribers and
// publishers ask it for channels and re-subscribe or re-open on their own.
//
// It replaces watermill-amqp v3.1.0's ConnectionWrapper, whose reconnect
// goroutine replaces its connection and its "connected" channel without the
// lock that IsConnected and Connection read them under (go test -race
// reported it during reconnect tests).
type conn struct {
	dial    func() (*amqp.Connection, error)
	backoff func() retry.Backoff // a fresh one per outage
	log     *slog.Logger

	mu      sync.Mutex
	c       *amqp.Connection // nil while reconnecting
	closed  bool
	closing chan struct{}
}

// openConn dials once (the caller retries a broker that is down at start)
// and keeps the connection up from then on.
func openConn(dial func() (*amqp.Connection, error), backoff func() retry.Backoff, log *slog.Logger) (*conn, error) {
	c0, err := dial()
	if err != nil {
		return nil, err
	}
	k := &conn{dial: dial, backoff: backoff, log: log, c: c0, closing: make(chan struct{})}
	go k.watch(c0)
	return k, nil
}

// IsConnected reports whether a connection is up.
func (k *conn) IsConnected() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c != nil && !k.c.IsClosed()
}

// Channel opens a channel on the current connection.
func (k *conn) Channel() (*amqp.Channel, error) {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	if c == nil || c.IsClosed() {
		return nil, errNotConnected
	}
	return c.Channel()
}

// Close stops reconnecting and closes the connection (the broker requeues
// whatever is unacked on it). It does not wait for a re-dial in progress
// (up to the dial timeout per broker host): watch closes what that dial
// returns.
func (k *conn) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	close(k.closing)
	c := k.c
	k.c = nil
	k.mu.Unlock()
	if c != nil && !c.IsClosed() {
		return c.Close()
	}
	return nil
}

// watch waits for cur to drop, then re-dials until it succeeds or Close.
func (k *conn) watch(cur *amqp.Connection) {
	for {
		dropped := cur.NotifyClose(make(chan *amqp.Error, 1)) // closed at once if cur already is
		select {
		case <-k.closing:
			return
		case err := <-dropped:
			k.mu.Lock()
			if k.closed { // Close closed it
				k.mu.Unlock()
				return
			}
			k.c = nil
			k.mu.Unlock()
			k.log.Warn("broker connection lost; reconnecting", "err", closeReason(err))
		}
		bo := k.backoff()
		for {
			next, err := k.dial()
			if err == nil {
				k.mu.Lock()
				if k.closed {
					k.mu.Unlock()
					_ = next.Close()
					return
				}
				k.c, cur = next, next
				k.mu.Unlock()
				k.log.Info("reconnected to the broker")
				break
			}
			wait, _ := bo.Next() // capped, never stops
			k.log.Warn("broker not reachable, retrying", "in", wait.Round(time.Millisecond), "err", err)
			select {
			case <-time.After(wait):
			case <-k.closing:
				return
			}
		}
	}
}

func closeReason(err *amqp.Error) error {
	if err == nil {
		return errors.New("connection closed")
	}
	return err
}
