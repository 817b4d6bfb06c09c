package broker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher is a watermill publisher to one exchange, the watermill topic
// being the routing key. Publish returns only once the broker confirmed
// each message: one message, one confirmed publish.
//
// It is used instead of watermill-amqp's Publisher, whose channel pool
// loses a channel for good each time re-opening it fails while the
// connection is being re-established (Publish then blocks forever once
// the pool is empty). Here one confirm-mode channel is shared: the lock
// covers only the send, so concurrent publishes wait for their confirms
// together, and the channel is re-opened lazily after a failure.
type Publisher struct {
	conn     *Conn
	exchange string

	mu     sync.Mutex
	ch     *amqp.Channel
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher publishes to exchange ("" is the default exchange: the
// topic is then the queue's name).
func NewPublisher(conn *Conn, exchange string) *Publisher {
	return &Publisher{conn: conn, exchange: exchange}
}

// Publish sends msgs with routing key topic, persistent, with their
// metadata as headers and their UUID as message id, and waits for each
// confirm (or the end of the message's context).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		dc, err := p.send(topic, msg)
		if err != nil {
			return err
		}
		ok, err := dc.WaitContext(msg.Context())
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the broker's confirm of the publish to exchange %q key %q: %w", p.exchange, topic, err)
		case !ok:
			return fmt.Errorf("broker did not confirm the publish to exchange %q key %q", p.exchange, topic)
		}
	}
	return nil
}

func (p *Publisher) send(key string, msg *message.Message) (*amqp.DeferredConfirmation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("publisher closed")
	}
	if p.ch == nil || p.ch.IsClosed() {
		ch, err := p.conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("opening a channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, fmt.Errorf("enabling publisher confirms: %w", err)
		}
		p.ch = ch
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

// Close closes the channel; publishing afterwards fails.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
	return nil
}
