package bus

import (
	"errors"
	"fmt"
	"sync"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
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
// confirm arrives, so confirms never pipeline. Here one confirm-mode
// channel is shared: the lock covers only the send, many publishes wait
// for their confirms at once, and the channel is re-opened lazily after a
// failure.
type confirmPublisher struct {
	conn     *wamqp.ConnectionWrapper
	exchange string

	mu     sync.Mutex
	ch     *amqp.Channel
	closed bool
}

var _ message.Publisher = (*confirmPublisher)(nil)

func newConfirmPublisher(conn *wamqp.ConnectionWrapper, exchange string) *confirmPublisher {
	return &confirmPublisher{conn: conn, exchange: exchange}
}

// Publish sends msgs with routing key topic, persistent, and waits for the
// broker's confirms (or the end of each message's context).
func (p *confirmPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		dc, err := p.send(topic, msg)
		if err != nil {
			return err
		}
		ok, err := dc.WaitContext(msg.Context())
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the broker's confirm: %w", err)
		case !ok:
			return fmt.Errorf("broker did not confirm the publish to exchange %q key %q", p.exchange, topic)
		}
	}
	return nil
}

func (p *confirmPublisher) send(key string, msg *message.Message) (*amqp.DeferredConfirmation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("publisher closed")
	}
	if p.ch == nil || p.ch.IsClosed() {
		if err := p.open(); err != nil {
			return nil, err
		}
	}
	headers := make(amqp.Table, len(msg.Metadata))
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(msg.Context(), p.exchange, key, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    msg.UUID,
		Headers:      headers,
		Body:         msg.Payload,
	})
	if err != nil {
		_ = p.ch.Close()
		p.ch = nil
		return nil, fmt.Errorf("publishing to exchange %q key %q: %w", p.exchange, key, err)
	}
	return dc, nil
}

func (p *confirmPublisher) open() error {
	if !p.conn.IsConnected() {
		return errNotConnected
	}
	ch, err := p.conn.Connection().Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("enabling publisher confirms: %w", err)
	}
	p.ch = ch
	return nil
}

// Close closes the channel; publishing afterwards fails.
func (p *confirmPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
	return nil
}
