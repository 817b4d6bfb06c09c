package bus

import (
	"errors"
	"fmt"
	"sync/atomic"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmPublisher publishes to one exchange with the watermill topic as
// routing key and returns only after the broker confirmed every message.
//
// It replaces watermill-amqp v3.1.0's Publisher, whose channel pool loses a
// channel for good each time re-opening it fails while the connection is
// being re-established (pooledChannelProvider.Channel drops it on a
// validate error), so after a few publishes during a reconnect the pool is
// empty and Publish blocks forever; its validate also dereferences a nil
// *amqp.Error after a clean channel close. Here a channel goes back to the
// pool in every case and is re-opened lazily on the next publish.
type confirmPublisher struct {
	conn     *wamqp.ConnectionWrapper
	exchange string
	pool     chan *confirmChannel
	closed   atomic.Bool
}

type confirmChannel struct{ ch *amqp.Channel }

var _ message.Publisher = (*confirmPublisher)(nil)

func newConfirmPublisher(conn *wamqp.ConnectionWrapper, exchange string, size int) *confirmPublisher {
	p := &confirmPublisher{conn: conn, exchange: exchange, pool: make(chan *confirmChannel, size)}
	for range size {
		p.pool <- &confirmChannel{}
	}
	return p
}

// Publish sends msgs with routing key topic, persistent, and waits for the
// broker's confirms (or the message context's end).
func (p *confirmPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return errors.New("publisher closed")
	}
	c := <-p.pool
	defer func() { p.pool <- c }()
	for _, msg := range msgs {
		if err := p.publishOne(c, topic, msg); err != nil {
			if c.ch != nil {
				_ = c.ch.Close()
				c.ch = nil
			}
			return err
		}
	}
	return nil
}

func (p *confirmPublisher) publishOne(c *confirmChannel, key string, msg *message.Message) error {
	if c.ch == nil || c.ch.IsClosed() {
		if !p.conn.IsConnected() {
			return errors.New("not connected to the broker")
		}
		ch, err := p.conn.Connection().Channel()
		if err != nil {
			return fmt.Errorf("opening a channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("enabling publisher confirms: %w", err)
		}
		c.ch = ch
	}
	headers := make(amqp.Table, len(msg.Metadata))
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	ctx := msg.Context()
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    msg.UUID,
		Headers:      headers,
		Body:         msg.Payload,
	})
	if err != nil {
		return fmt.Errorf("publishing to exchange %q key %q: %w", p.exchange, key, err)
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("waiting for the broker's confirm: %w", err)
	case !ok:
		return fmt.Errorf("broker did not confirm the publish to exchange %q key %q", p.exchange, key)
	}
	return nil
}

// Close closes the pooled channels; publishing afterwards fails.
func (p *confirmPublisher) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	for range cap(p.pool) {
		c := <-p.pool
		if c.ch != nil {
			_ = c.ch.Close()
		}
	}
	return nil
}
