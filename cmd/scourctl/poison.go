package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/bus/broker"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var count, width int
		list := &cobra.Command{
			Use:   "list",
			Short: "show the messages in the poison queue without consuming them",
			Long: `Shows up to --count messages of scour's poison queue (bus.poison_queue) with
the reason scour poisoned them, and puts every one back (as RabbitMQ's
"get, requeue"): no management plugin needed. The broker and the queue come
from scourd's configuration (bus.url, SCOUR_BUS_URL).

The broker counts every listing as one delivery of each listed message.
scour declares the poison queue with a delivery limit no listing reaches;
a poison queue declared by an earlier scour has none, and RabbitMQ 4 then
drops its messages after 20 deliveries: on such a broker this command warns
(stderr) until the policy in docs/operations.md (The poison queue) is set
or the queue is recreated.

Columns: ` + joinKeys(poisonColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				p, err := poisonPeek(brokerOf(cfg.Bus.URL, cfg.Bus.TLS), cfg.Bus.PoisonQueue, count, bus.KeepQueueArgs(&cfg.Bus))
				if err != nil {
					return err
				}
				if w := p.warning(cfg.Bus.PoisonQueue); w != "" {
					fmt.Fprintln(c.stderr, w)
				}
				return c.out.write(c.stdout, poisonListing(p.msgs, width))
			},
		}
		list.Flags().IntVar(&count, "count", 20, "at most this many messages, oldest first")
		list.Flags().IntVar(&width, "body-width", 120, "cut the body to this many characters (0: whole)")
		return group("poison", "inspect the poison queue (no management plugin needed)",
			"Messages scour can never process (docs/operations.md, The poison queue).", list)
	})
}

var poisonColumns = []string{"reason", "error", "redelivered", "bytes", "body"}

// peek is what poisonPeek read.
type peek struct {
	msgs []amqp.Delivery
	// legacy: the queue has no delivery limit of its own (declared by a
	// scour before bus.KeepDeliveryLimit).
	legacy  bool
	version string // the broker's, as it announced it ("4.0.5")
}

// warning is the note for the operator when the listing brought the
// queue's messages closer to being dropped: a legacy queue on RabbitMQ 4,
// whose default delivery limit (20) applies to it unless a policy raises
// it, which AMQP does not show.
func (p *peek) warning(queue string) string {
	if !p.legacy || broker.MajorVersion(p.version) < 4 {
		return ""
	}
	most := int64(0)
	for _, d := range p.msgs {
		if n := deliveryCount(d); n > most {
			most = n
		}
	}
	return fmt.Sprintf("warning: queue %s was declared by an earlier scour without a delivery limit, and RabbitMQ %s drops a message of it "+
		"after 20 deliveries unless a policy raises the limit; every listing is one delivery (the most-delivered message listed has had %d before this one). "+
		"Unless the delivery-limit policy of docs/operations.md (The poison queue) is set, set it now.", queue, p.version, most)
}

// deliveryCount is the broker's x-delivery-count header (quorum queues:
// how often the message was delivered before), 0 when absent.
func deliveryCount(d amqp.Delivery) int64 {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// poisonPeek gets up to n messages from queue and requeues all of them
// when it is done (a message is held until then, so none is read twice).
// keepArgs are the queue's arguments as scourd declares it
// (bus.KeepQueueArgs): redeclaring with them, on a channel of its own,
// tells a legacy queue (the broker refuses the delivery limit it lacks).
func poisonPeek(b broker.Options, queue string, n int, keepArgs amqp.Table) (*peek, error) {
	conn, err := broker.Dial(b)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	p := &peek{version: broker.ServerVersion(conn), legacy: legacyKeepQueue(conn, queue, keepArgs)}
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	defer func() {
		if len(p.msgs) > 0 {
			_ = ch.Nack(p.msgs[len(p.msgs)-1].DeliveryTag, true, true)
		}
	}()
	for len(p.msgs) < n {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return p, fmt.Errorf("reading queue %s: %w", queue, err)
		}
		if !ok {
			break
		}
		p.msgs = append(p.msgs, d)
	}
	return p, nil
}

// legacyKeepQueue reports whether queue exists without the delivery limit
// keepArgs give it (bus.IsLegacyKeepQueue). Only an existing queue is
// redeclared: a missing one is reported by the listing, not created.
func legacyKeepQueue(conn *amqp.Connection, queue string, keepArgs amqp.Table) bool {
	if keepArgs == nil {
		return false
	}
	ch, err := conn.Channel()
	if err != nil {
		return false
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		return false
	}
	_, err = ch.QueueDeclare(queue, true, false, false, false, keepArgs)
	return bus.IsLegacyKeepQueue(err)
}

func poisonListing(msgs []amqp.Delivery, width int) *listing {
	l := newListing(poisonColumns...)
	for _, d := range msgs {
		body := string(d.Body)
		if !utf8.ValidString(body) {
			body = fmt.Sprintf("%q", d.Body)
		}
		body = strings.Join(strings.Fields(body), " ")
		if width > 0 && len(body) > width {
			body = body[:width] + "..."
		}
		reason, _ := d.Headers[bus.HeaderPoisonReason].(string)
		if reason == "" {
			reason = "unroutable-command" // the command exchange's alternate exchange adds no header
		}
		errText, _ := d.Headers["reason_poisoned"].(string)
		l.add(reason, errText, d.Redelivered, len(d.Body), body)
	}
	return l
}
