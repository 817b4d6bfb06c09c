package bus

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// builder adapts topology to watermill-amqp, whose subscriber calls
// BuildTopology on every (re)subscribe and whose publisher calls
// ExchangeDeclare once per topic.
type builder struct {
	t       *topology
	byQueue map[string]func(channel) error
}

var _ wamqp.TopologyBuilder = (*builder)(nil)

func (b *builder) BuildTopology(ch *amqp.Channel, p wamqp.BuildTopologyParams, _ wamqp.Config, _ watermill.LoggerAdapter) error {
	declare, ok := b.byQueue[p.QueueName]
	if !ok {
		return fmt.Errorf("no topology for queue %q", p.QueueName)
	}
	return declare(ch)
}

func (b *builder) ExchangeDeclare(ch *amqp.Channel, exchange string, _ wamqp.Config) error {
	if exchange != b.t.cfg.Exchange {
		return fmt.Errorf("publisher asked for exchange %q, scour publishes to %q only", exchange, b.t.cfg.Exchange)
	}
	return b.t.commandExchange(ch)
}

// marshaler wraps watermill-amqp's DefaultMarshaler. Nova sends no message
// UUID header and other publishers may send header values that are not
// strings, which DefaultMarshaler rejects by nacking with requeue: an
// endless redelivery loop. Non-string headers are stringified instead so
// the message reaches the handler (and, if bad, the poison queue).
type marshaler struct{ wamqp.DefaultMarshaler }

func (m marshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	if !allStrings(d.Headers) {
		h := make(amqp.Table, len(d.Headers))
		for k, v := range d.Headers {
			if s, ok := v.(string); ok {
				h[k] = s
			} else {
				h[k] = fmt.Sprint(v)
			}
		}
		d.Headers = h
	}
	msg, err := m.DefaultMarshaler.Unmarshal(d)
	if err != nil {
		return nil, err
	}
	if msg.UUID == "" {
		msg.UUID = watermill.NewUUID()
	}
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	return msg, nil
}

func allStrings(t amqp.Table) bool {
	for _, v := range t {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}

func constant(s string) func(string) string { return func(string) string { return s } }

// subscriberConfig consumes the queue named by the watermill topic.
func (b *Bus) subscriberConfig(bld *builder) wamqp.Config {
	return wamqp.Config{
		Marshaler:       marshaler{},
		Exchange:        wamqp.ExchangeConfig{GenerateName: constant("")},
		Queue:           wamqp.QueueConfig{GenerateName: wamqp.GenerateQueueNameTopicName, Durable: true},
		QueueBind:       wamqp.QueueBindConfig{GenerateRoutingKey: constant("")},
		Consume:         wamqp.ConsumeConfig{Qos: wamqp.QosConfig{PrefetchCount: b.cfg.Prefetch}},
		TopologyBuilder: bld,
	}
}
