package harness

import (
	"testing"

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
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatalf("e2e harness: publishing %s: dialing %s: %v", n.EventType, b.URL(), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("e2e harness: publishing %s: %v", n.EventType, err)
	}
	if err := DeclareNovaExchange(ch, n.Exchange); err != nil {
		t.Fatalf("e2e harness: declaring exchange %s: %v", n.Exchange, err)
	}
	if _, err := ch.QueueDeclare(n.RoutingKey, false, false, false, false, nil); err != nil {
		t.Fatalf("e2e harness: declaring oslo's default queue %s: %v", n.RoutingKey, err)
	}
	if err := ch.QueueBind(n.RoutingKey, n.RoutingKey, n.Exchange, false, nil); err != nil {
		t.Fatalf("e2e harness: binding %s: %v", n.RoutingKey, err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("e2e harness: confirm mode: %v", err)
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), n.Exchange, n.RoutingKey, false, false, n.Publishing)
	if err != nil {
		t.Fatalf("e2e harness: publishing %s: %v", n.EventType, err)
	}
	if ok, err := conf.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("e2e harness: broker did not confirm %s (ok=%v): %v", n.EventType, ok, err)
	}
	return n
}
