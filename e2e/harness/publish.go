package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclareNovaExchange declares the nova exchange as oslo.messaging's rabbit
// driver does with default settings (topic, non-durable, not auto-deleted).
// Declaring it durable against an existing non-durable one fails with 406.
func DeclareNovaExchange(ch *amqp.Channel, name string) error {
	return ch.ExchangeDeclare(name, "topic", false, false, false, false, nil)
}

// PublishNotification publishes ev in format f to the broker's vhost as
// nova's notifier does through oslo.messaging (messagingv2 driver, rabbit
// transport): declare the nova exchange and the default queue named after
// the routing key (as oslo does on first publish), then publish the envelope
// with oslo's properties and wait for the broker's confirm. It returns the
// notification as sent.
func (b *Broker) PublishNotification(t testing.TB, ev Event, f Format) *Notification {
	t.Helper()
	n, err := BuildNotification(ev, f)
	if err != nil {
		t.Fatalf("e2e harness: building notification: %v", err)
	}
	if err := publishConfirmed(t.Context(), b.URL(), n, 0); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	return n
}

// publishConfirmed is one oslo-style publish of n on url, waiting for the
// broker's confirm (at most timeout when it is not 0).
func publishConfirmed(ctx context.Context, url string, n *Notification, timeout time.Duration) error {
	cfg := amqp.Config{}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
		cfg.Dial = amqp.DefaultDial(timeout)
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return fmt.Errorf("publishing %s: dialing %s: %w", n.EventType, url, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("publishing %s: %w", n.EventType, err)
	}
	if err := DeclareNovaExchange(ch, n.Exchange); err != nil {
		return fmt.Errorf("declaring exchange %s: %w", n.Exchange, err)
	}
	if _, err := ch.QueueDeclare(n.RoutingKey, false, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring oslo's default queue %s: %w", n.RoutingKey, err)
	}
	if err := ch.QueueBind(n.RoutingKey, n.RoutingKey, n.Exchange, false, nil); err != nil {
		return fmt.Errorf("binding %s: %w", n.RoutingKey, err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, n.Exchange, n.RoutingKey, false, false, n.Publishing)
	if err != nil {
		return fmt.Errorf("publishing %s: %w", n.EventType, err)
	}
	if ok, err := conf.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("broker did not confirm %s (ok=%v): %v", n.EventType, ok, err)
	}
	return nil
}
