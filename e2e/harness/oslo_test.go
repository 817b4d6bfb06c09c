package harness

import (
	"encoding/json"

	amqp "github.com/rabbitmq/amqp091-go"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestNotificationMatchesOslo has the real oslo.messaging (the one in the
// RabbitMQ image) publish a notification, then builds the same notification
// with the harness from oslo's random parts (message_id, timestamp,
// _unique_id) and requires identical bytes and AMQP properties.
func TestNotificationMatchesOslo(t *testing.T) {
	t.Parallel()
	b := StartRabbitMQ(t).VHost(t)
	b.needContainer(t, "running oslo.messaging")
	script, err := os.ReadFile("testdata/oslo_notify.py")
	if err != nil {
		t.Fatal(err)
	}
	path := "/tmp/" + UniqueName("oslo_notify") + ".py"
	if err := b.svc.c.CopyToContainer(t.Context(), script, path, 0o644); err != nil {
		t.Fatal(err)
	}
	ctxTS := time.Date(2026, 11, 22, 2, 59, 50, 123456000, time.UTC)
	for _, f := range []Format{Versioned, Legacy} {
		t.Run(f.String(), func(t *testing.T) {
			ev := Event{
				Type: "instance.delete.end", InstanceUUID: NewUUID(), Host: "cn-ünïcode", Node: "cn1",
				ProjectID: "6f70656e737461636b20342065766572", UserID: "fake",
				RequestID: "req-" + NewUUID(), ContextTimestamp: ctxTS,
			}
			want0, err := BuildNotification(ev, f)
			if err != nil {
				t.Fatal(err)
			}
			d := consume(t, b, want0.RoutingKey)
			payload, _ := want0.Message.Get("payload")
			publisher, _ := want0.Message.Get("publisher_id")
			topic := map[Format]string{Versioned: "versioned_notifications", Legacy: "notifications"}[f]
			args, err := PyDumps(Object{
				{"url", "rabbit://guest:guest@localhost:5672/" + b.VHostName()},
				{"topic", topic},
				{"publisher_id", publisher},
				{"event_type", want0.EventType},
				{"payload", payload},
				{"context", Object{
					{"user_id", ev.UserID}, {"project_id", ev.ProjectID}, {"request_id", ev.RequestID},
					{"roles", []any{"admin", "member", "reader"}},
					{"timestamp", ctxTS.Format("2006-01-02T15:04:05.000000")},
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := b.svc.exec(t.Context(), "", "python3", path, string(args)); err != nil {
				t.Fatalf("oslo publish: %v\n%s", err, out)
			}
			fromOslo := receive(t, d)

			// Take oslo's random parts and rebuild with the harness.
			var env struct {
				Message string `json:"oslo.message"`
			}
			if err := jsonUnmarshal(fromOslo.Body, &env); err != nil {
				t.Fatal(err)
			}
			var inner struct {
				MessageID string `json:"message_id"`
				Timestamp string `json:"timestamp"`
				UniqueID  string `json:"_unique_id"`
			}
			if err := jsonUnmarshal([]byte(env.Message), &inner); err != nil {
				t.Fatal(err)
			}
			ev.MessageID, ev.UniqueID = inner.MessageID, inner.UniqueID
			if ev.Timestamp, err = time.Parse("2006-01-02 15:04:05.999999", inner.Timestamp); err != nil {
				t.Fatal(err)
			}
			ours := b.PublishNotification(t, ev, f)
			if string(ours.Body) != string(fromOslo.Body) {
				t.Fatalf("harness body differs from oslo's:\noslo    %s\nharness %s", fromOslo.Body, ours.Body)
			}
			fromHarness := receive(t, d)
			type props struct {
				Exchange, RoutingKey, ContentType, ContentEncoding, MessageID, Type, AppID, CorrelationID string
				DeliveryMode, Priority                                                                    uint8
				Headers                                                                                   int
				Timestamp                                                                                 time.Time
			}
			get := func(m deliveryLike) props {
				return props{m.Exchange, m.RoutingKey, m.ContentType, m.ContentEncoding, m.MessageId, m.Type, m.AppId, m.CorrelationId,
					m.DeliveryMode, m.Priority, len(m.Headers), m.Timestamp}
			}
			if d := cmp.Diff(get(fromOslo), get(fromHarness)); d != "" {
				t.Errorf("AMQP properties (-oslo +harness):\n%s", d)
			}
		})
	}
}

type deliveryLike = amqp.Delivery

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
