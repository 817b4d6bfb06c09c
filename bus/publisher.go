package bus

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmPublisher publishes to one exchange with the watermill topic as
// routing key and returns only after the broker confirmed every message.
//
// It replaces watermill-amqp v3.1.0's Publisher for two reasons: its
// channel pool loses a channel for good each time re-opening it fails
// while the connection is being re-established (Publish then blocks
// forever once the pool is empty; its validate also dereferences a nil
// *amqp.Error after a clean close), and a pooled channel is held until its
// confirm arrives, so confirms never pipeline. Here a few confirm-mode
// channels ("lanes", each a separate process in RabbitMQ) are shared round
// robin: a lane's lock covers only the send, many publishes wait for their
// confirms at once, and a lane's channel is re-opened lazily after a
// failure.
type confirmPublisher struct {
	conn     *conn
	exchange string
	lanes    []*lane
	next     atomic.Uint32
}

type lane struct {
	mu     sync.Mutex
	ch     *amqp.Channel
	closed bool
}

var _ message.Publisher = (*confirmPublisher)(nil)

func newConfirmPublisher(conn *conn, exchange string, lanes int) *confirmPublisher {
	p := &confirmPublisher{conn: conn, exchange: exchange}
	for range max(lanes, 1) {
		p.lanes = append(p.lanes, &lane{})
	}
	return p
}

// Publish sends msgs with routing key topic, persistent, and waits for the
// broker's confirms (or the end of each message's context).
func (p *confirmPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		wait, err := p.Send(topic, msg)
		if err != nil {
			return err
		}
		if err := wait(); err != nil {
			return err
		}
	}
	return nil
}

// Send publishes msg and returns, without waiting, a function that waits
// for its confirm (or the end of msg's context): several publishes can
// then wait for their confirms together.
func (p *confirmPublisher) Send(key string, msg *message.Message) (wait func() error, err error) {
	dc, err := p.send(key, msg)
	if err != nil {
		return nil, err
	}
	return func() error {
		ok, err := dc.WaitContext(msg.Context())
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the broker's confirm: %w", err)
		case !ok:
			return fmt.Errorf("broker did not confirm the publish to exchange %q key %q", p.exchange, key)
		}
		return nil
	}, nil
}

func (p *confirmPublisher) send(key string, msg *message.Message) (*amqp.DeferredConfirmation, error) {
	l := p.lanes[int(p.next.Add(1))%len(p.lanes)]
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("publisher closed")
	}
	if l.ch == nil || l.ch.IsClosed() {
		if err := p.open(l); err != nil {
			return nil, err
		}
	}
	headers := make(amqp.Table, len(msg.Metadata))
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	dc, err := l.ch.PublishWithDeferredConfirmWithContext(msg.Context(), p.exchange, key, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    msg.UUID,
		Headers:      headers,
		Body:         msg.Payload,
	})
	if err != nil {
		_ = l.ch.Close()
		l.ch = nil
		return nil, fmt.Errorf("publishing to exchange %q key %q: %w", p.exchange, key, err)
	}
	return dc, nil
}

func (p *confirmPublisher) open(l *lane) error {
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("enabling publisher confirms: %w", err)
	}
	l.ch = ch
	return nil
}

// Close closes the channels; publishing afterwards fails.
func (p *confirmPublisher) Close() error {
	for _, l := range p.lanes {
		l.mu.Lock()
		l.closed = true
		if l.ch != nil {
			_ = l.ch.Close()
			l.ch = nil
		}
		l.mu.Unlock()
	}
	return nil
}
