package bus

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

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

	// legacy: keep queues (poison, unroutable) found declared by an
	// earlier release, without KeepDeliveryLimit; they are declared in
	// that form from then on (until resetLegacy).
	mu     sync.Mutex
	legacy map[string]bool
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
	if err := t.keep(ch, q, "bus.exchange"); err != nil {
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
// others): a keep queue, see KeepQueueArgs.
//
// The unroutable queue is declared the same way: without a dead-letter
// exchange of its own (which would loop back to it).
func (t *topology) poison(ch channel) error {
	return t.keep(ch, t.cfg.PoisonQueue, "bus.poison_queue")
}

// KeepDeliveryLimit is the x-delivery-limit of the queues scour must never
// lose a message from: the poison queue, whose messages are the
// operator's only copy of what could not run, and the unroutable queue,
// which scourd empties into it. RabbitMQ 4 gives a quorum queue declared
// without x-delivery-limit a limit of 20 and drops (no dead-letter
// exchange here) a message returned more often; every basic.get that is
// requeued or left unsettled is one return (`scourctl poison list`, the
// management UI's "Get messages"), on 3.x as on 4.x. -1, which 4.x takes
// as "no limit", makes RabbitMQ 3.x drop every requeued message, so the
// limit is the largest the broker stores instead: 68 years of one listing
// a second.
const KeepDeliveryLimit = math.MaxInt32

// KeepQueueArgs are the arguments of a keep queue (the poison queue, the
// unroutable queue) as this release declares it; nil for classic queues,
// which have no delivery limit.
func KeepQueueArgs(cfg *Config) amqp.Table {
	if cfg.ClassicQueues {
		return nil
	}
	return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": int64(KeepDeliveryLimit)}
}

// IsLegacyKeepQueue reports whether err is the broker refusing
// KeepQueueArgs because the queue exists without x-delivery-limit: it was
// declared by a scour release before KeepDeliveryLimit. The broker refuses
// any change of x-delivery-limit on an existing queue (3.x and 4.x alike),
// so such a queue keeps RabbitMQ 4's default limit of 20 until a policy
// raises it (docs/operations.md, The poison queue) or it is recreated.
func IsLegacyKeepQueue(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed &&
		strings.Contains(ae.Reason, "inequivalent arg 'x-delivery-limit'") &&
		strings.Contains(ae.Reason, "current is none")
}

// errLegacyKeepQueue: a keep queue turned out to be legacy; its channel
// is closed (the refusal), and declaring again on a new channel works.
type errLegacyKeepQueue struct {
	queue string
	err   error
}

func (e *errLegacyKeepQueue) Error() string {
	return fmt.Sprintf("queue %s exists without x-delivery-limit (declared by an earlier scour): declaring it again in that form: %v", e.queue, e.err)
}

func (e *errLegacyKeepQueue) Unwrap() error { return e.err }

func (t *topology) isLegacy(queue string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.legacy[queue]
}

// resetLegacy forgets what was learned, so the next declaration tries the
// current form again (a queue recreated since then gets the limit).
func (t *topology) resetLegacy() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.legacy = nil
}

// keep declares a keep queue with KeepQueueArgs, or in the form an
// earlier release declared it in where it exists so (see
// IsLegacyKeepQueue): refusing it would stop every scourd of an existing
// deployment at start.
func (t *topology) keep(ch channel, name, setting string) error {
	args := KeepQueueArgs(t.cfg)
	if args != nil && t.isLegacy(name) {
		args = t.queueArgs()
	}
	err := t.declare(ch, name, setting, args)
	if err != nil && args["x-delivery-limit"] != nil && IsLegacyKeepQueue(err) {
		t.mu.Lock()
		if t.legacy == nil {
			t.legacy = map[string]bool{}
		}
		t.legacy[name] = true
		t.mu.Unlock()
		return &errLegacyKeepQueue{queue: name, err: err}
	}
	return err
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
