package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/scour-project/scour/bus"
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

Columns: ` + joinKeys(poisonColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				msgs, err := poisonPeek(cfg.Bus.URL, cfg.Bus.PoisonQueue, count)
				if err != nil {
					return err
				}
				return c.out.write(c.stdout, poisonListing(msgs, width))
			},
		}
		list.Flags().IntVar(&count, "count", 20, "at most this many messages, oldest first")
		list.Flags().IntVar(&width, "body-width", 120, "cut the body to this many characters (0: whole)")
		return group("poison", "inspect the poison queue (no management plugin needed)",
			"Messages scour can never process (docs/operations.md, The poison queue).", list)
	})
}

var poisonColumns = []string{"reason", "error", "redelivered", "bytes", "body"}

// poisonPeek gets up to n messages from queue and requeues all of them
// when it is done (a message is held until then, so none is read twice).
func poisonPeek(url, queue string, n int) ([]amqp.Delivery, error) {
	conn, err := dialBroker(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var got []amqp.Delivery
	defer func() {
		if len(got) > 0 {
			_ = ch.Nack(got[len(got)-1].DeliveryTag, true, true)
		}
	}()
	for len(got) < n {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return got, fmt.Errorf("reading queue %s: %w", queue, err)
		}
		if !ok {
			break
		}
		got = append(got, d)
	}
	return got, nil
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
