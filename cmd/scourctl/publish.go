package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/internal/oslo"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var url, exchange, key, host, instance string
		cmd := &cobra.Command{
			Use:   "publish-sample SAMPLE.json",
			Short: "publish a Nova notification sample to the broker as oslo.messaging does",
			Long: `SAMPLE.json is an inner oslo message like Nova's doc/notification_samples
(event_type, payload, priority, publisher_id), e.g.
notification/testdata/versioned/instance-delete-end.json.`,
			Args: exactArgs(1, "one SAMPLE.json"),
			RunE: func(cmd *cobra.Command, args []string) error {
				inner, eventType, sampleKey, err := prepareSample(args[0], host, instance)
				if err != nil {
					return err
				}
				// On a host with scourd's configuration, reach the broker
				// as scourd does: its bus.url (unless --url) and bus.tls.
				cfg, err := c.loadConfig(true)
				if err != nil {
					return err
				}
				// scourd's bus.tls belongs to its bus.url: a broker named
				// with --url gets none (system CAs for amqps://).
				var tls broker.TLSConfig
				if cfg != nil && !cmd.Flags().Changed("url") {
					url, tls = cfg.Bus.URL, cfg.Bus.TLS
				}
				if key == "" {
					key = sampleKey
				}
				if err := publishSample(cmd.Context(), brokerOf(url, tls), exchange, key, inner); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "published %s to exchange %s with routing key %s\n", eventType, exchange, key)
				return nil
			},
		}
		fs := cmd.Flags()
		fs.StringVar(&url, "url", envOr("SCOUR_BUS_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker URL (env SCOUR_BUS_URL); rabbit://, amqp:// or amqps://; default scourd's bus.url, with its bus.tls, where its configuration exists")
		fs.StringVar(&exchange, "exchange", "nova", "Nova's exchange")
		fs.StringVar(&key, "routing-key", "", "routing key (default as oslo routes the sample: <topic>.<priority lower-case>, topic versioned_notifications, or notifications for a legacy payload; e.g. versioned_notifications.error for instance.create.error)")
		fs.StringVar(&host, "host", "", "set the payload host and the publisher (nova-compute:HOST / compute.HOST)")
		fs.StringVar(&instance, "instance", "", "set the instance uuid")
		return cmd
	})
}

// prepareSample adds what oslo adds on the wire (message_id, timestamp,
// _unique_id, _context_request_id) and applies the overrides. routingKey
// is the key oslo publishes the sample with on Nova's default topics:
// <topic>.<priority lower-case>, so an ERROR sample (instance.create.error)
// goes to versioned_notifications.error as Nova sends it.
func prepareSample(path, host, instance string) (inner []byte, eventType, routingKey string, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", "", err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", path, err)
	}
	eventType, _ = m["event_type"].(string)
	priority, _ := m["priority"].(string)
	if priority == "" {
		return nil, "", "", fmt.Errorf("%s: no \"priority\" (INFO, ERROR, ...): oslo routes a notification by it; add it or pass --routing-key", path)
	}
	payload, _ := m["payload"].(map[string]any)
	fields, versioned := payload, false
	if d, ok := payload["nova_object.data"].(map[string]any); ok {
		fields, versioned = d, true
	}
	if host != "" && fields != nil {
		fields["host"] = host
		if versioned {
			m["publisher_id"] = "nova-compute:" + host
		} else {
			m["publisher_id"] = "compute." + host
		}
	}
	if instance != "" && fields != nil {
		if versioned {
			fields["uuid"] = instance
		} else {
			fields["instance_id"] = instance
		}
	}
	id := uuid4()
	m["message_id"] = id
	m["timestamp"] = time.Now().UTC().Format("2006-01-02 15:04:05.000000")
	m["_unique_id"] = strings.ReplaceAll(uuid4(), "-", "")
	m["_context_request_id"] = "req-" + uuid4()
	topic := "notifications"
	if versioned {
		topic = "versioned_notifications"
	}
	inner, err = json.Marshal(m)
	return inner, eventType, topic + "." + strings.ToLower(priority), err
}

// brokerOf is how scourctl reaches a scour broker URL (rabbit:// with
// several hosts, amqp://, amqps://): with scourd's own dialer (each host
// in turn) and scourd's bus.tls (ca_file, client certificate,
// server_name), so it connects wherever scourd does.
func brokerOf(url string, tls broker.TLSConfig) broker.Options {
	return broker.Options{URL: url, TLS: tls, Heartbeat: 10 * time.Second, Name: "scourctl"}
}

func publishSample(ctx context.Context, b broker.Options, exchange, key string, inner []byte) error {
	conn, err := broker.Dial(b)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclarePassive(exchange, "topic", false, false, false, false, nil); err != nil {
		return fmt.Errorf("exchange %q: %w (start scourd or a Nova service first; they declare it)", exchange, err)
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return oslo.Publish(ctx, ch, exchange, key, inner)
}

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
