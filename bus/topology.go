package bus

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TopologyError is a declaration the broker refused because it conflicts
// with what exists (406 PRECONDITION_FAILED), is missing (404 on a passive
// declare) or is forbidden (403). Retrying cannot fix it: the operator must
// change Setting. scourd reports it once and exits with a distinct status
// (see cmd/scourd) instead of crash-looping against the broker.
type TopologyError struct {
	Object  string // "exchange nova", "queue scour.notifications"
	Setting string // the configuration key to change
	Hint    string
	Err     *amqp.Error
}

func (e *TopologyError) Error() string {
	return fmt.Sprintf("declaring %s: broker refused with %d %s: %s; %s (setting: %s)",
		e.Object, e.Err.Code, codeName(e.Err.Code), e.Err.Reason, e.Hint, e.Setting)
}

func (e *TopologyError) Unwrap() error { return e.Err }

func codeName(code int) string {
	switch code {
	case amqp.PreconditionFailed:
		return "PRECONDITION_FAILED"
	case amqp.NotFound:
		return "NOT_FOUND"
	case amqp.AccessRefused:
		return "ACCESS_REFUSED"
	}
	return "error"
}

// asTopologyError turns a channel-closing broker refusal into a
// TopologyError; other errors (connection lost) are returned unchanged.
func asTopologyError(err error, object, setting, hint string) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.PreconditionFailed, amqp.NotFound, amqp.AccessRefused:
			return &TopologyError{Object: object, Setting: setting, Hint: hint, Err: ae}
		}
	}
	return fmt.Errorf("declaring %s: %w", object, err)
}

// channel is the part of *amqp.Channel topology needs.
type channel interface {
	ExchangeDeclare(name, kind string, durable, autoDelete, internal, noWait bool, args amqp.Table) error
	ExchangeDeclarePassive(name, kind string, durable, autoDelete, internal, noWait bool, args amqp.Table) error
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueBind(name, key, exchange string, noWait bool, args amqp.Table) error
	QueueUnbind(name, key, exchange string, args amqp.Table) error
}

// topology declares scour's side of the broker. Every declaration is
// idempotent and runs again on each reconnect: Nova's exchange is not
// durable by default, so after a broker restart it (and our bindings to
// it) exist again only because we re-declare them.
//
// This is done with amqp091-go directly rather than watermill-amqp's
// DefaultTopologyBuilder, which can neither declare passively nor tell a
// 406 from a lost connection, and declares one exchange per queue.
type topology struct {
	cfg   *Config
	host  string
	queue string // notifications queue (per-host in direct mode)
}

func (t *topology) queueArgs() amqp.Table {
	if !t.cfg.ClassicQueues {
		return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	}
	return nil
}

// novaExchange declares Nova's exchange with oslo's flags, or passively.
func (t *topology) novaExchange(ch channel) error {
	n := t.cfg.Nova
	obj := "exchange " + n.Exchange
	if n.Passive {
		err := ch.ExchangeDeclarePassive(n.Exchange, amqp.ExchangeTopic, false, false, false, false, nil)
		if err != nil {
			return asTopologyError(err, obj, "bus.nova.passive (SCOUR_BUS_NOVA_PASSIVE)",
				"the exchange does not exist yet: start a Nova service first or set bus.nova.passive=false so scour declares it")
		}
		return nil
	}
	if err := ch.ExchangeDeclare(n.Exchange, amqp.ExchangeTopic, n.Durable, false, false, false, nil); err != nil {
		return asTopologyError(err, obj, "bus.nova.durable (SCOUR_BUS_NOVA_DURABLE)",
			fmt.Sprintf("scour declared it with durable=%v; set bus.nova.durable to Nova's [oslo_messaging_rabbit] amqp_durable_queues, or bus.nova.passive=true", n.Durable))
	}
	return nil
}

// Notifications declares scour's notification queue and binds it to Nova's
// exchange. It never touches oslo's own queue (named like the routing key).
func (t *topology) notifications(ch channel) error {
	if err := t.novaExchange(ch); err != nil {
		return err
	}
	if err := t.declareQueue(ch, t.queue, "bus.notifications_queue"); err != nil {
		return err
	}
	for _, key := range t.cfg.Nova.RoutingKeys {
		if err := ch.QueueBind(t.queue, key, t.cfg.Nova.Exchange, false, nil); err != nil {
			return asTopologyError(err, "binding "+t.queue+" to "+t.cfg.Nova.Exchange+" with "+key, "bus.nova.routing_keys", "check the broker user's permissions")
		}
	}
	return nil
}

// UnroutableExchange is the alternate exchange of scour's command exchange
// and the dead-letter exchange of its quorum queues.
func (c *Config) UnroutableExchange() string { return c.Exchange + ".unroutable" }

// UnroutableQueue is the queue bound to UnroutableExchange (same name):
// scourd moves what arrives there to the poison queue with its reason.
func (c *Config) UnroutableQueue() string { return c.UnroutableExchange() }

// declareFor declares queue and everything it needs (exchanges, bindings,
// the dead-letter path). Run before every (re)subscription: Nova's
// exchange is not durable by default, so after a broker restart it and
// our bindings to it exist again only because we re-declare them.
func (t *topology) declareFor(ch channel, queue string) error {
	switch queue {
	case t.queue:
		return t.notifications(ch)
	case t.cfg.HostQueue(t.host):
		return t.hostQueue(ch)
	case t.cfg.UnroutableQueue():
		return t.deadLetter(ch)
	case t.cfg.PoisonQueue:
		return t.poison(ch)
	}
	return fmt.Errorf("no topology for queue %q", queue)
}

// commandExchange declares scour's own durable topic exchange, with an
// alternate exchange that sends every command no queue is bound for (a
// host whose scourd never started, or whose `host` differs from the name
// Nova uses) to the poison queue. Without it the broker confirms such a
// publish and drops it, and the dispatcher would ack the notification.
func (t *topology) commandExchange(ch channel) error {
	if err := t.deadLetter(ch); err != nil {
		return err
	}
	args := amqp.Table{"alternate-exchange": t.cfg.UnroutableExchange()}
	if err := ch.ExchangeDeclare(t.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, args); err != nil {
		return asTopologyError(err, "exchange "+t.cfg.Exchange, "bus.exchange",
			"an exchange of that name exists with other flags (scour's is a durable topic exchange): pick another name")
	}
	return nil
}

// hostQueue declares this host's command queue, bound to its host key and
// the broadcast key.
func (t *topology) hostQueue(ch channel) error {
	if err := t.commandExchange(ch); err != nil {
		return err
	}
	q := t.cfg.HostQueue(t.host)
	if err := t.declareQueue(ch, q, "bus.host_queue_prefix"); err != nil {
		return err
	}
	for _, key := range []string{HostKey(t.host), t.cfg.BroadcastKey} {
		if err := ch.QueueBind(q, key, t.cfg.Exchange, false, nil); err != nil {
			return asTopologyError(err, "binding "+q+" with "+key, "bus.exchange", "check the broker user's permissions")
		}
	}
	return nil
}

// deadLetter declares the fanout exchange that is the command exchange's
// alternate exchange and the quorum queues' dead-letter exchange, and the
// unroutable queue bound to it, which scourd empties into the poison queue
// with a reason header (park). Earlier releases bound the poison queue to
// the exchange directly, without a reason; that binding is removed.
func (t *topology) deadLetter(ch channel) error {
	ae := t.cfg.UnroutableExchange()
	if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return asTopologyError(err, "exchange "+ae, "bus.exchange",
			"an exchange of that name exists with other flags (scour's is a durable fanout exchange): pick another bus.exchange")
	}
	if err := t.poison(ch); err != nil {
		return err
	}
	q := t.cfg.UnroutableQueue()
	if err := t.declare(ch, q, "bus.exchange", t.queueArgs()); err != nil {
		return err
	}
	if err := ch.QueueBind(q, "", ae, false, nil); err != nil {
		return asTopologyError(err, "binding "+q+" to "+ae, "bus.exchange", "check the broker user's permissions")
	}
	if err := ch.QueueUnbind(t.cfg.PoisonQueue, "", ae, nil); err != nil {
		return asTopologyError(err, "unbinding "+t.cfg.PoisonQueue+" from "+ae, "bus.poison_queue", "check the broker user's permissions")
	}
	return nil
}

// poison declares the poison queue (durable; classic or quorum like the
// others, without a delivery limit: nothing consumes it).
//
// The unroutable queue is declared the same way: without a dead-letter
// exchange of its own (which would loop back to it).
func (t *topology) poison(ch channel) error {
	return t.declare(ch, t.cfg.PoisonQueue, "bus.poison_queue", t.queueArgs())
}

// declareQueue declares a consumed queue. A quorum queue dead-letters a
// message redelivered bus.delivery_limit times to the poison queue (via
// the unroutable exchange, which the command exchange declared).
func (t *topology) declareQueue(ch channel, name, setting string) error {
	args := t.queueArgs()
	if args != nil {
		if err := t.deadLetter(ch); err != nil {
			return err
		}
		args = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
			"x-delivery-limit":       int64(t.cfg.DeliveryLimit),
			"x-dead-letter-exchange": t.cfg.UnroutableExchange()}
	}
	return t.declare(ch, name, setting, args)
}

func (t *topology) declare(ch channel, name, setting string, args amqp.Table) error {
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return asTopologyError(err, "queue "+name, setting+" or bus.classic_queues (SCOUR_BUS_CLASSIC_QUEUES)",
			fmt.Sprintf("a queue of that name exists with other arguments (scour declares durable, classic_queues=%v): delete it or change the name", t.cfg.ClassicQueues))
	}
	return nil
}
