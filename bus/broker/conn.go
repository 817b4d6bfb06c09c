package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/sethvargo/go-retry"
)

// Conn is scourd's broker connection: it re-dials with capped, jittered
// backoff whenever the connection drops, until Close. Subscribers and
// publishers ask it for channels and re-subscribe or re-open on their own.
//
// It replaces watermill-amqp v3.1.0's ConnectionWrapper, whose reconnect
// goroutine replaces its connection and its "connected" channel without the
// lock that IsConnected and Connection read them under (go test -race
// reported it during reconnect tests).
type Conn struct {
	dialer  *dialer // nil in tests that dial by hand
	dial    func() (*amqp.Connection, error)
	backoff func() retry.Backoff // a fresh one per outage
	log     *slog.Logger
	retries RetryCounter

	mu      sync.Mutex
	c       *amqp.Connection // nil while reconnecting
	closed  bool
	closing chan struct{}
}

// Options say how to reach the broker.
type Options struct {
	URL       string // Nova's transport_url form or an AMQP URI; see ParseURL
	TLS       TLSConfig
	Heartbeat time.Duration
	Name      string // the connection's name in the broker's management UI
	// Retries counts each failed dial that is retried (nil: not counted).
	Retries RetryCounter
}

// RetryCounter counts retried broker operations: op is "connect" (the
// first connection), "reconnect" (after the connection dropped) or
// "resubscribe" (a consumer that could not subscribe, Subscriber).
type RetryCounter interface{ BrokerRetry(op string) }

type noRetryCounter struct{}

func (noRetryCounter) BrokerRetry(string) {}

// Connect dials the broker, retrying with capped, jittered backoff until
// ctx ends: a broker that is down at start-up is waited for, not a reason
// to exit. A login the broker refuses refusalAttempts times in a row is
// returned as an *AccessError. The connection then reconnects by itself.
func Connect(ctx context.Context, o Options, log *slog.Logger) (*Conn, error) {
	uri, ac, d, err := amqpConfig(&o)
	if err != nil {
		return nil, err
	}
	redacted := redactedURL(o.URL)
	dial := func() (*amqp.Connection, error) { return amqp.DialConfig(uri, *ac) }
	backoff := func() retry.Backoff {
		return retry.WithJitterPercent(20, retry.WithCappedDuration(30*time.Second, retry.NewExponential(500*time.Millisecond)))
	}
	if o.Retries == nil {
		o.Retries = noRetryCounter{}
	}
	var c *Conn
	refused, failed := 0, 0
	err = retry.Do(ctx, backoff(), func(context.Context) error {
		k, err := openConn(dial, backoff, log, o.Retries)
		if ae := asAccessError(err, redacted, vhostOf(o.URL)); ae != nil {
			log.Error("the broker refused scour's login: change the configuration", "err", ae, "attempt", refused+1)
			if refused++; refused >= refusalAttempts {
				return ae
			}
			return retry.RetryableError(err)
		}
		if err != nil {
			refused = 0
			failed++
			o.Retries.BrokerRetry("connect")
			// Once per series at WARN; the count comes with the
			// connection, or with the error when ctx ends first.
			lvl := slog.LevelDebug
			if failed == 1 {
				lvl = slog.LevelWarn
			}
			log.Log(ctx, lvl, "broker not reachable, retrying (further failures at debug level until connected)",
				"broker", redacted, "err", err, "attempt", failed)
			return retry.RetryableError(err)
		}
		if failed > 0 {
			log.Warn("connected to the broker after failed attempts", "broker", redacted, "failed_attempts", failed)
		}
		c = k
		return nil
	})
	var ae *AccessError
	if errors.As(err, &ae) {
		return nil, ae
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s (%d failed attempts): %w", redacted, failed, err)
	}
	c.dialer = d
	return c, nil
}

// Dial connects once, as Connect's first attempt does (every host of a
// multi-host URL in turn, bus.tls for amqps), without retrying or
// reconnecting: for a short-lived client such as scourctl.
func Dial(o Options) (*amqp.Connection, error) {
	uri, ac, _, err := amqpConfig(&o)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.DialConfig(uri, *ac)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", redactedURL(o.URL), err)
	}
	return conn, nil
}

// redactedURL is the broker URL without passwords, for logs and errors.
func redactedURL(s string) string {
	if u, err := ParseURL(s); err == nil {
		return u.String()
	}
	return Redact(s)
}

// Socket is the current connection's network socket (tests close it to
// simulate a network failure); nil before the first dial.
func (k *Conn) Socket() net.Conn {
	if k.dialer == nil {
		return nil
	}
	k.dialer.mu.Lock()
	defer k.dialer.mu.Unlock()
	return k.dialer.last
}

// openConn dials once (the caller retries a broker that is down at start)
// and keeps the connection up from then on.
func openConn(dial func() (*amqp.Connection, error), backoff func() retry.Backoff, log *slog.Logger, retries RetryCounter) (*Conn, error) {
	c0, err := dial()
	if err != nil {
		return nil, err
	}
	k := &Conn{dial: dial, backoff: backoff, log: log, retries: retries, c: c0, closing: make(chan struct{})}
	go k.watch(c0)
	return k, nil
}

// IsConnected reports whether a connection is up.
func (k *Conn) IsConnected() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c != nil && !k.c.IsClosed()
}

// Channel opens a channel on the current connection.
func (k *Conn) Channel() (*amqp.Channel, error) {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	if c == nil || c.IsClosed() {
		return nil, errNotConnected
	}
	return c.Channel()
}

// ServerVersion is the broker's version as it announces it on the current
// connection ("4.0.5"); "" while reconnecting or when it says none.
func (k *Conn) ServerVersion() string {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	if c == nil {
		return ""
	}
	return ServerVersion(c)
}

// ServerVersion is the version c's broker announced ("" when none).
func ServerVersion(c *amqp.Connection) string {
	v, _ := c.Properties["version"].(string)
	return v
}

// MajorVersion is the major number of a broker version ("4.0.5": 4), 0
// when it has none.
func MajorVersion(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// Close stops reconnecting and closes the connection (the broker requeues
// whatever is unacked on it). It does not wait for a re-dial in progress
// (up to the dial timeout per broker host): watch closes what that dial
// returns.
func (k *Conn) Close() error {
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
func (k *Conn) watch(cur *amqp.Connection) {
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
		for failed := 0; ; failed++ {
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
				if failed > 0 {
					// The series' one WARN with its count.
					k.log.Warn("reconnected to the broker after failed attempts", "failed_attempts", failed)
				} else {
					k.log.Info("reconnected to the broker")
				}
				break
			}
			k.retries.BrokerRetry("reconnect")
			wait, _ := bo.Next() // capped, never stops
			k.log.Debug("broker not reachable, retrying", "in", wait.Round(time.Millisecond), "err", err, "attempt", failed+1)
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
