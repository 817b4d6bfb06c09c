package oslo

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publish publishes an inner oslo message (JSON object text, e.g. one of
// Nova's notification samples) the way oslo.messaging's rabbit driver does:
// v2.0 envelope serialised like Python's json.dumps, content_type
// application/json, content_encoding utf-8, delivery_mode 2, no headers.
// It waits for the broker's confirm when ch is in confirm mode. For
// scourctl publish-sample, tests and benchmarks; scourd never publishes to
// Nova's exchange.
func Publish(ctx context.Context, ch *amqp.Channel, exchange, routingKey string, inner []byte) error {
	body, err := Encode(inner)
	if err != nil {
		return fmt.Errorf("encoding oslo envelope: %w", err)
	}
	return PublishRaw(ctx, ch, exchange, routingKey, body)
}

// PublishRaw publishes body with oslo's message properties.
func PublishRaw(ctx context.Context, ch *amqp.Channel, exchange, routingKey string, body []byte) error {
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, false, false, amqp.Publishing{
		ContentType:     "application/json",
		ContentEncoding: "utf-8",
		DeliveryMode:    amqp.Persistent,
		Headers:         amqp.Table{},
		Body:            body,
	})
	if err != nil {
		return fmt.Errorf("publishing to %s/%s: %w", exchange, routingKey, err)
	}
	if conf == nil { // channel not in confirm mode
		return nil
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("broker nacked the publish to %s/%s", exchange, routingKey)
	}
	return nil
}
