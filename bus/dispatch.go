package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/notification"
)

// dispatcher consumes Nova's notifications and publishes commands.
type dispatcher struct {
	b     *Bus
	batch *batcher
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
	ev, err := b.pool.Decode(msg.Payload)
	if errors.Is(err, errDecodersStopped) {
		return nil, err // shutting down: requeued
	}
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

// handle: decode, publish the command (broker-confirmed, retried; it may
// share its message with other commands for the same host, see batcher),
// then return nil so the router acks the notification.
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
	dispatched := func() { // on the batcher's goroutine, once confirmed
		d.b.m.CommandDispatched(string(c.Kind), string(c.Scope))
		d.b.log.LogAttrs(context.Background(), slog.LevelInfo, "notification dispatched", // LogAttrs: no boxing
			slog.String("event", c.EventType), slog.String("instance", c.InstanceUUID), slog.String("kind", string(c.Kind)),
			slog.String("target", targetOf(c)), slog.String("routing_key", key), slog.String("request_id", c.RequestID),
			slog.String("format", c.Format))
	}
	err = d.b.withRetry(msg.Context(), func(ctx context.Context) error {
		return d.batch.publish(ctx, key, msg.UUID, body, dispatched)
	})
	if err != nil {
		return fmt.Errorf("publishing %s command for instance %s to %s: %w (message requeued)", c.Kind, c.InstanceUUID, key, err)
	}
	return nil
}

func targetOf(c *command.Command) string {
	if c.Scope == command.ScopeBroadcast {
		return "broadcast"
	}
	return c.Host
}

// intake consumes this host's command queue. A message carries one
// command or a batch (command.UnmarshalBatch).
type intake struct {
	b      *Bus
	poison *confirmPublisher // default exchange: the poison queue's name is the key
}

func (in *intake) handle(msg *message.Message) error {
	els, err := command.UnmarshalBatch(msg.Payload)
	if err != nil {
		return in.b.poison(msg, "invalid_command", err)
	}
	if len(els) == 1 { // the whole message is the command: poisoned as is
		c, reason, err := in.check(els[0])
		if err != nil {
			return in.b.poison(msg, reason, err)
		}
		return in.b.execute(msg.Context(), c, func(err error) error {
			return in.b.poison(msg, "handler_rejected", err)
		})
	}
	return in.batch(msg, els)
}

// check returns the element's command, or why it cannot run here.
func (in *intake) check(el command.Element) (*command.Command, string, error) {
	switch c := el.Command; {
	case el.Err != nil:
		return nil, "invalid_command", el.Err
	case c.Scope == command.ScopeHost && c.Host != in.b.host:
		return nil, "misrouted", fmt.Errorf("command for host %q reached %q's queue", c.Host, in.b.host)
	default:
		return c, "", nil
	}
}

// batch runs the commands of one message: those of one instance in
// message order, different instances side by side. A command rejected for
// good is published alone to the poison queue (its neighbours are not);
// when any command fails transiently the message is requeued, and on
// redelivery the commands already handled or poisoned are acked as
// duplicates (Bus.execute) while the rest run again.
func (in *intake) batch(msg *message.Message, els []command.Element) error {
	ctx := msg.Context()
	errs := make([]error, len(els))
	groups := map[string][]int{}
	var order []string
	type unusable struct {
		i      int
		reason string
		err    error
	}
	var bad []unusable
	for i, el := range els {
		c, reason, err := in.check(el)
		if err != nil {
			bad = append(bad, unusable{i, reason, err})
			continue
		}
		if _, ok := groups[c.InstanceUUID]; !ok {
			order = append(order, c.InstanceUUID)
		}
		groups[c.InstanceUUID] = append(groups[c.InstanceUUID], i)
	}
	var wg sync.WaitGroup
	for _, inst := range order {
		wg.Go(func() {
			for j, i := range groups[inst] {
				errs[i] = in.b.execute(ctx, els[i].Command, func(err error) error {
					return in.poisonOne(ctx, msg, els[i].Raw, "handler_rejected", err)
				})
				if errs[i] != nil { // later commands of the instance must not overtake it
					for _, k := range groups[inst][j+1:] {
						errs[k] = fmt.Errorf("%s command for instance %s not run: an earlier command for the instance failed", els[k].Command.Kind, inst)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 { // parked once the rest is through: no copy per redelivery
		for _, u := range bad {
			if err := in.poisonOne(ctx, msg, els[u.i].Raw, u.reason, u.err); err != nil {
				failed = append(failed, err)
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d commands of message %s failed (message requeued; commands already handled are not run again): %w",
			len(failed), len(els), msg.UUID, errors.Join(failed...))
	}
	return nil
}

// poisonOne publishes one command of a batch (its JSON text) to the
// poison queue with the reason headers the poison middleware gives a whole
// message, and returns nil once the broker confirmed it.
func (in *intake) poisonOne(ctx context.Context, msg *message.Message, raw []byte, reason string, cause error) error {
	out := message.NewMessage(msg.UUID+"/"+strconv.FormatUint(in.b.poisonSeq.Add(1), 10), raw)
	out.SetContext(ctx)
	out.Metadata.Set(HeaderPoisonReason, reason)
	out.Metadata.Set(middleware.ReasonForPoisonedKey, cause.Error())
	out.Metadata.Set(middleware.PoisonedTopicKey, message.SubscribeTopicFromCtx(msg.Context()))
	out.Metadata.Set(middleware.PoisonedHandlerKey, message.HandlerNameFromCtx(msg.Context()))
	if err := in.poison.Publish(in.b.cfg.PoisonQueue, out); err != nil {
		return fmt.Errorf("moving a %s command of message %s to the poison queue: %w (message requeued)", reason, msg.UUID, err)
	}
	in.b.m.Poisoned(reason)
	in.b.log.Warn("command poisoned", "reason", reason, "queue", in.b.cfg.PoisonQueue, "message", msg.UUID, "err", cause)
	return nil
}

// execute hands c to the handler with retries, once per delivery key,
// waiting for one of the HandlerConcurrency slots. A
// permanent failure is given to poison while the key is still owned; when
// poison returns nil (the command is parked) the key counts as done, so a
// redelivery does not run it again. It returns nil, poison's error, or the
// transient error (the message is requeued).
func (b *Bus) execute(ctx context.Context, c *command.Command, poison func(error) error) error {
	key := ""
	if c.MessageID != "" {
		key = c.MessageID + "/" + string(c.Kind) + "/" + c.InstanceUUID
		owned, err := b.seen.begin(ctx, key)
		if err != nil {
			return err // shutting down: requeue
		}
		if !owned {
			b.m.CommandHandled(string(c.Kind), "duplicate", 0)
			b.log.Info("duplicate command acked without handling", "instance", c.InstanceUUID, "kind", c.Kind, "message_id", c.MessageID)
			return nil
		}
	}
	select { // at most HandlerConcurrency handler calls, from every batch and consumer
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		if key != "" {
			b.seen.end(key, false)
		}
		return fmt.Errorf("%s command for instance %s not run: %w (message requeued)", c.Kind, c.InstanceUUID, ctx.Err())
	}
	start := time.Now()
	err := b.withRetry(ctx, func(ctx context.Context) error { return b.handler.Handle(ctx, c) })
	<-b.slots
	switch {
	case err == nil:
		b.m.CommandHandled(string(c.Kind), "ok", time.Since(start))
	case IsPermanent(err):
		b.m.CommandHandled(string(c.Kind), "poisoned", time.Since(start))
		err = poison(fmt.Errorf("%s command for instance %s: %w", c.Kind, c.InstanceUUID, err))
	default:
		b.m.CommandHandled(string(c.Kind), "retried", time.Since(start))
		err = fmt.Errorf("%s command for instance %s: %w (message requeued)", c.Kind, c.InstanceUUID, err)
	}
	if key != "" {
		b.seen.end(key, err == nil)
	}
	return err
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
	return d.b.execute(msg.Context(), c, func(err error) error {
		return d.b.poison(msg, "handler_rejected", err)
	})
}
