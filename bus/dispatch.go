package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/notification"
)

// dispatcher consumes Nova's notifications and publishes commands.
type dispatcher struct {
	b   *Bus
	pub *confirmPublisher
}

// RoutingKey is where c is published on scour's exchange.
func (c *Config) RoutingKey(cmd *command.Command) string {
	if cmd.Scope == command.ScopeBroadcast {
		return c.BroadcastKey
	}
	return HostKey(cmd.Host)
}

// decode classifies a notification: (nil, nil) means ignored (acked).
func (b *Bus) decode(msg *message.Message) (*command.Command, error) {
	ev, err := b.decoder.Decode(msg.Payload)
	if err != nil {
		return nil, b.poison(msg, string(notification.ReasonOf(err)), err)
	}
	b.m.NotificationReceived(ev.EventType, string(ev.Format))
	if !ev.Relevant() {
		b.m.NotificationIgnored()
		return nil, nil
	}
	c, err := notification.Dispatch(ev)
	if err != nil {
		return nil, b.poison(msg, string(notification.ReasonInvalidCommand), err)
	}
	return c, nil
}

// handle: decode, publish the command (broker-confirmed, retried), then
// return nil so the router acks the notification.
func (d *dispatcher) handle(msg *message.Message) error {
	c, err := d.b.decode(msg)
	if c == nil || err != nil {
		return err
	}
	body, err := command.Marshal(c)
	if err != nil {
		return d.b.poison(msg, string(notification.ReasonInvalidCommand), err)
	}
	key := d.b.cfg.RoutingKey(c)
	id := msg.UUID + "/command" // the AMQP message id of the command: unique per delivery, no crypto/rand read
	err = d.b.withRetry(msg.Context(), func(ctx context.Context) error {
		out := message.NewMessage(id, body)
		out.SetContext(ctx)
		out.Metadata.Set("scour-event-type", c.EventType)
		return d.pub.Publish(key, out)
	})
	if err != nil {
		return fmt.Errorf("publishing %s command for instance %s to %s: %w (message requeued)", c.Kind, c.InstanceUUID, key, err)
	}
	d.b.m.CommandDispatched(string(c.Kind), string(c.Scope))
	d.b.log.Info("notification dispatched", "event", c.EventType, "instance", c.InstanceUUID, "kind", c.Kind,
		"target", targetOf(c), "routing_key", key, "request_id", c.RequestID, "format", c.Format)
	return nil
}

func targetOf(c *command.Command) string {
	if c.Scope == command.ScopeBroadcast {
		return "broadcast"
	}
	return c.Host
}

// intake consumes this host's command queue.
type intake struct{ b *Bus }

func (in *intake) handle(msg *message.Message) error {
	c, err := command.Unmarshal(msg.Payload)
	if err != nil {
		return in.b.poison(msg, "invalid_command", err)
	}
	if c.Scope == command.ScopeHost && c.Host != in.b.host {
		return in.b.poison(msg, "misrouted", fmt.Errorf("command for host %q reached %q's queue", c.Host, in.b.host))
	}
	return in.b.run(msg, c)
}

// run hands c to the handler with retries, once per delivery key.
func (b *Bus) run(msg *message.Message, c *command.Command) error {
	key := ""
	if c.MessageID != "" {
		key = c.MessageID + "/" + string(c.Kind) + "/" + c.InstanceUUID
		owned, err := b.seen.begin(msg.Context(), key)
		if err != nil {
			return err // shutting down: requeue
		}
		if !owned {
			b.m.CommandHandled(string(c.Kind), "duplicate", 0)
			b.log.Info("duplicate command acked without handling", "instance", c.InstanceUUID, "kind", c.Kind, "message_id", c.MessageID)
			return nil
		}
	}
	start := time.Now()
	err := b.withRetry(msg.Context(), func(ctx context.Context) error { return b.handler.Handle(ctx, c) })
	if key != "" {
		b.seen.end(key, err == nil)
	}
	switch {
	case err == nil:
		b.m.CommandHandled(string(c.Kind), "ok", time.Since(start))
		return nil
	case IsPermanent(err):
		b.m.CommandHandled(string(c.Kind), "poisoned", time.Since(start))
		return b.poison(msg, "handler_rejected", fmt.Errorf("%s command for instance %s: %w", c.Kind, c.InstanceUUID, err))
	default:
		b.m.CommandHandled(string(c.Kind), "retried", time.Since(start))
		return fmt.Errorf("%s command for instance %s: %w (message requeued)", c.Kind, c.InstanceUUID, err)
	}
}

// direct consumes a per-compute notification topic and runs commands for
// this host in-process (ModeDirect): no scour exchange, no host queue.
type direct struct{ b *Bus }

func (d *direct) handle(msg *message.Message) error {
	c, err := d.b.decode(msg)
	if c == nil || err != nil {
		return err
	}
	if c.Scope == command.ScopeHost && c.Host != d.b.host {
		d.b.log.Info("command for another host ignored (direct mode)", "event", c.EventType, "instance", c.InstanceUUID, "target", c.Host)
		d.b.m.NotificationIgnored()
		return nil
	}
	return d.b.run(msg, c)
}
