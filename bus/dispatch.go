package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/notification"
)

// decode classifies a notification: (nil, nil) means ignored (acked).
func (b *Bus) decode(msg *message.Message) (*command.Command, error) {
	ev, err := b.decodeEvent(msg.Payload)
	if err != nil {
		return nil, err // a *notification.DecodeError: poisoned with its reason
	}
	b.m.NotificationReceived(ev.EventType, string(ev.Format))
	if !ev.Relevant() {
		b.m.NotificationIgnored()
		return nil, nil
	}
	c, err := notification.Dispatch(ev)
	if err != nil {
		return nil, poison(string(notification.ReasonInvalidCommand), err)
	}
	return c, nil
}

// dispatcher consumes Nova's notifications and publishes commands.
type dispatcher struct {
	b   *Bus
	pub *broker.Publisher // scour's exchange
}

// handle: decode, publish the command (one message per target) and wait
// for the broker's confirms, then return nil so the router acks the
// notification. A failed publish requeues the notification: the targets
// already published get the command again, which their intake acks as a
// duplicate (same message id) or handles idempotently.
func (d *dispatcher) handle(msg *message.Message) error {
	c, err := d.b.decode(msg)
	if c == nil || err != nil {
		return err
	}
	body, err := command.Marshal(c)
	if err != nil {
		return poison(string(notification.ReasonInvalidCommand), err)
	}
	keys, hosts := d.targets(msg.Context(), c)
	for _, key := range keys {
		id := msg.UUID + "/command"
		if len(keys) > 1 {
			id += "/" + key
		}
		out := message.NewMessage(id, body)
		out.SetContext(msg.Context())
		if err := d.pub.Publish(key, out); err != nil {
			return fmt.Errorf("publishing %s command for instance %s to %s: %w", c.Kind, c.InstanceUUID, key, err)
		}
		d.b.m.CommandDispatched(string(c.Kind), string(c.Scope))
	}
	d.b.log.Info("notification dispatched", "event", c.EventType, "instance", c.InstanceUUID, "kind", c.Kind,
		"target", hosts, "routing_key", strings.Join(keys, ","), "request_id", c.RequestID, "format", c.Format)
	return nil
}

// routeLookupTimeout bounds the claims lookup of a broadcast: past it the
// command goes to every host rather than holding up the dispatch.
const routeLookupTimeout = 5 * time.Second

// targets returns the routing keys c is published to, and who they reach
// (for the log). A host-scoped command goes to its host. A broadcast goes
// to the hosts holding a live claim of its instance when a resolver is
// set (RouteBroadcasts) and names any: they are the only hosts that act
// on it (handlers: a host without a live claim drops a broadcast). It
// goes to every host (the broadcast key) when routing is off, the lookup
// fails, or it names no host: the fallback costs broker copies, not
// Placement reads. Routing only picks who receives the command; each
// receiver still decides from its own Placement tree (safety rule 3),
// and a host missed here is covered by its periodic scan.
func (d *dispatcher) targets(ctx context.Context, c *command.Command) (keys []string, hosts string) {
	if c.Scope != command.ScopeBroadcast {
		return []string{HostKey(c.Host)}, c.Host
	}
	every := []string{d.b.cfg.BroadcastKey}
	if d.b.resolver == nil || c.InstanceUUID == "" {
		d.b.m.BroadcastSent("off")
		return every, "broadcast"
	}
	lctx, cancel := context.WithTimeout(ctx, routeLookupTimeout)
	defer cancel()
	start := time.Now()
	found, err := d.b.resolver.LiveClaimHosts(lctx, c.InstanceUUID)
	d.b.m.RouteLookup(time.Since(start), err)
	switch {
	case err != nil:
		d.b.m.BroadcastSent("lookup_failed")
		d.b.log.Warn("broadcast sent to every host: the hosts holding the instance's claims could not be looked up (check the claims database)",
			"event", c.EventType, "instance", c.InstanceUUID, "kind", c.Kind, "err", err)
		return every, "broadcast"
	case len(found) == 0:
		d.b.m.BroadcastSent("unresolved")
		return every, "broadcast"
	}
	d.b.m.BroadcastSent("routed")
	for _, h := range found {
		keys = append(keys, HostKey(h))
	}
	return keys, strings.Join(found, ",")
}

// intake consumes this host's command queue: one command per message.
type intake struct{ b *Bus }

// handle runs the message's command. The array form that dispatchers
// before this release sent (command.Decode, rolling upgrade only) is run
// command by command, in message order; a command rejected for good
// (invalid, misrouted, a handler's Permanent error) sends the whole
// message to the poison queue once the others ran, with the first
// rejected command's reason. A transient failure retries, then requeues
// the message, and on redelivery the commands already handled are acked
// as duplicates (Bus.execute) while the rest run again.
func (in *intake) handle(msg *message.Message) error {
	els, err := in.b.decodeCommands(msg.Payload)
	if err != nil {
		return err // ErrInvalid: poisoned
	}
	var rejected error
	for i, el := range els {
		err := in.run(msg.Context(), el)
		switch {
		case err == nil:
		case !IsPermanent(err):
			return err // retried, then requeued
		case len(els) > 1 && rejected == nil:
			rejected = fmt.Errorf("command %d of the %d in this message (the others were handled, or rejected too): %w", i+1, len(els), err)
		case rejected == nil:
			rejected = err
		}
	}
	return rejected
}

// run checks el and hands its command to the handler.
func (in *intake) run(ctx context.Context, el command.Element) error {
	switch c := el.Command; {
	case el.Err != nil:
		return poison("invalid_command", el.Err)
	case c.Scope == command.ScopeHost && c.Host != in.b.host:
		return poison("misrouted", fmt.Errorf("command for host %q reached %q's queue", c.Host, in.b.host))
	default:
		return in.b.execute(ctx, c)
	}
}

// execute hands c to the handler once per delivery key, waiting for one
// of the HandlerConcurrency slots. It returns nil (handled, or a
// duplicate), a Permanent error (poisoned), or a transient one (retried,
// then requeued).
func (b *Bus) execute(ctx context.Context, c *command.Command) error {
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
	select { // at most HandlerConcurrency handler calls, from every consumer
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		if key != "" {
			b.seen.end(key, false)
		}
		return fmt.Errorf("%s command for instance %s not run: %w (message requeued)", c.Kind, c.InstanceUUID, ctx.Err())
	}
	// done: handled; a redelivery is then acked without running it again.
	// A command rejected for good (or panicking) is not done: should its
	// poison publish fail, the redelivery runs it again and poisons it.
	done := false
	defer func() {
		<-b.slots
		if key != "" {
			b.seen.end(key, done)
		}
	}()
	start := time.Now()
	err := b.handler.Handle(ctx, c)
	switch {
	case err == nil:
		b.m.CommandHandled(string(c.Kind), "ok", time.Since(start))
	case IsPermanent(err):
		b.m.CommandHandled(string(c.Kind), "poisoned", time.Since(start))
		err = fmt.Errorf("%s command for instance %s: %w", c.Kind, c.InstanceUUID, err)
	default:
		b.m.CommandHandled(string(c.Kind), "retried", time.Since(start))
		err = fmt.Errorf("%s command for instance %s: %w", c.Kind, c.InstanceUUID, err)
	}
	done = err == nil
	return err
}

// direct consumes a per-compute notification topic and runs commands for
// this host in-process (ModeDirect): no scour exchange, no host queue.
type direct struct {
	b *Bus

	mu     sync.Mutex
	warned map[string]bool // other hosts named so far, up to maxWarnedHosts
}

// maxWarnedHosts bounds direct.warned: a cloud's host count, not its
// event count.
const maxWarnedHosts = 1024

func (d *direct) handle(msg *message.Message) error {
	c, err := d.b.decode(msg)
	if c == nil || err != nil {
		return err
	}
	if c.Scope == command.ScopeHost && c.Host != d.b.host {
		d.ignored(c)
		d.b.m.NotificationIgnored()
		return nil
	}
	return d.b.execute(msg.Context(), c)
}

// ignored logs a command for another host. A migration names the other
// end legitimately, but so does every event when `host` differs from
// Nova's name for this machine (cmp1 against cmp1.example.com), and then
// nothing is ever cleaned: the first command for each other name is a
// WARN that says so, the rest INFO.
func (d *direct) ignored(c *command.Command) {
	d.mu.Lock()
	first := !d.warned[c.Host] && len(d.warned) < maxWarnedHosts
	if first {
		if d.warned == nil {
			d.warned = map[string]bool{}
		}
		d.warned[c.Host] = true
	}
	d.mu.Unlock()
	args := []any{"event", c.EventType, "instance", c.InstanceUUID, "target", c.Host, "host", d.b.host}
	if first {
		d.b.log.Warn("command for another host ignored (direct mode); if the target is this machine's name in Nova, set host (SCOUR_HOST) to it (later commands for this target are logged at INFO)", args...)
		return
	}
	d.b.log.Info("command for another host ignored (direct mode)", args...)
}

// park moves what reached scour's unroutable queue to the poison queue
// with its reason: a command no host queue is bound for (the host's
// scourd never started, or its `host` differs from Nova's name for it),
// or a message a quorum queue dead-lettered after bus.delivery_limit
// deliveries (RabbitMQ's x-first-death-reason says which).
func park(msg *message.Message) error {
	why := msg.Metadata.Get("x-first-death-reason")
	switch {
	case why == "":
		return poison("unroutable", errors.New("no queue is bound for the command's routing key: is scourd running on that host, with the host name Nova uses?"))
	case strings.Contains(why, "delivery_limit"):
		return poison("delivery_limit", fmt.Errorf("requeued more than bus.delivery_limit times from %s", msg.Metadata.Get("x-first-death-queue")))
	default:
		return poison("dead_lettered", fmt.Errorf("dead-lettered from %s (%s)", msg.Metadata.Get("x-first-death-queue"), why))
	}
}
