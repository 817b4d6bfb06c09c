package harness

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// decodeTwice reads a notification the way a consumer must: envelope, then
// the JSON string inside it.
func decodeTwice(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var env map[string]string
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("envelope: %v: %s", err, body)
	}
	if env["oslo.version"] != "2.0" {
		t.Fatalf("oslo.version = %q", env["oslo.version"])
	}
	var msg map[string]any
	if err := json.Unmarshal([]byte(env["oslo.message"]), &msg); err != nil {
		t.Fatalf("oslo.message: %v", err)
	}
	return msg
}

func TestBuildNotification(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 11, 22, 2, 59, 51, 390927000, time.UTC)
	const inst = "0b3a9f34-2c55-4c4b-9d5c-7d8f2f6c1e01"
	tests := []struct {
		name          string
		ev            Event
		f             Format
		wantKey       string
		wantPriority  string // default INFO
		wantType      string
		wantPublisher string
		check         func(t *testing.T, payload map[string]any)
	}{
		{
			name:          "versioned delete on a compute",
			ev:            Event{Type: "instance.delete.end", InstanceUUID: inst, Host: "cn1", Node: "cn1.example", Timestamp: ts},
			f:             Versioned,
			wantKey:       "versioned_notifications.info",
			wantType:      "instance.delete.end",
			wantPublisher: "nova-compute:cn1",
			check: func(t *testing.T, p map[string]any) {
				d := p["nova_object.data"].(map[string]any)
				if d["uuid"] != inst || d["host"] != "cn1" || d["node"] != "cn1.example" {
					t.Errorf("overrides not applied: uuid=%v host=%v node=%v", d["uuid"], d["host"], d["node"])
				}
				if p["nova_object.name"] != "InstanceActionPayload" {
					t.Errorf("nova_object.name = %v", p["nova_object.name"])
				}
			},
		},
		{
			name:          "versioned shelve_offload has null host",
			ev:            Event{Type: "instance.shelve_offload.end", InstanceUUID: inst, NullHost: true, Timestamp: ts},
			f:             Versioned,
			wantKey:       "versioned_notifications.info",
			wantType:      "instance.shelve_offload.end",
			wantPublisher: "nova-compute:compute",
			check: func(t *testing.T, p map[string]any) {
				d := p["nova_object.data"].(map[string]any)
				if d["host"] != nil || d["node"] != nil {
					t.Errorf("host/node = %v/%v, want null", d["host"], d["node"])
				}
			},
		},
		{
			name:          "legacy delete is flat",
			ev:            Event{Type: "instance.delete.end", InstanceUUID: inst, Host: "cn1", Node: "cn1", Timestamp: ts},
			f:             Legacy,
			wantKey:       "notifications.info",
			wantType:      "compute.instance.delete.end",
			wantPublisher: "compute.cn1",
			check: func(t *testing.T, p map[string]any) {
				if p["instance_id"] != inst || p["host"] != "cn1" || p["node"] != "cn1" || p["state"] != "deleted" {
					t.Errorf("legacy payload = %v", p)
				}
				if _, ok := p["nova_object.data"]; ok {
					t.Error("legacy payload must not be versioned")
				}
			},
		},
		{
			name:          "legacy live migration source name",
			ev:            Event{Type: "instance.live_migration_post.end", InstanceUUID: inst, Host: "src", Timestamp: ts},
			f:             Legacy,
			wantKey:       "notifications.info",
			wantType:      "compute.instance.live_migration._post.end",
			wantPublisher: "compute.src",
		},
		{
			name:          "delete from nova-api when the compute is down keeps the api publisher",
			ev:            Event{Sample: "instance-delete-end_compute_down", InstanceUUID: inst, Host: "cn1", Timestamp: ts},
			f:             Versioned,
			wantKey:       "versioned_notifications.info",
			wantType:      "instance.delete.end",
			wantPublisher: "nova-api:fake-mini",
		},
		{
			name:          "create.error goes at priority ERROR on the .error key, as oslo routes it",
			ev:            Event{Type: "instance.create.error", InstanceUUID: inst, Host: "cn1", Timestamp: ts},
			f:             Versioned,
			wantKey:       "versioned_notifications.error",
			wantType:      "instance.create.error",
			wantPublisher: "nova-compute:cn1",
			wantPriority:  "ERROR",
		},
		{
			name:          "legacy create.error too",
			ev:            Event{Type: "instance.create.error", InstanceUUID: inst, Host: "cn1", Timestamp: ts},
			f:             Legacy,
			wantKey:       "notifications.error",
			wantType:      "compute.instance.create.error",
			wantPublisher: "compute.cn1",
			wantPriority:  "ERROR",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := BuildNotification(tt.ev, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if n.Exchange != "nova" || n.RoutingKey != tt.wantKey {
				t.Errorf("exchange/key = %s/%s, want nova/%s", n.Exchange, n.RoutingKey, tt.wantKey)
			}
			if !strings.HasPrefix(string(n.Body), `{"oslo.version": "2.0", "oslo.message": "{\"message_id\": \"`) {
				t.Errorf("envelope does not start as oslo writes it: %.80s", n.Body)
			}
			msg := decodeTwice(t, n.Body)
			wantPriority := tt.wantPriority
			if wantPriority == "" {
				wantPriority = "INFO"
			}
			if msg["event_type"] != tt.wantType || msg["publisher_id"] != tt.wantPublisher || msg["priority"] != wantPriority {
				t.Errorf("event_type/publisher/priority = %v/%v/%v", msg["event_type"], msg["publisher_id"], msg["priority"])
			}
			if msg["timestamp"] != "2026-11-22 02:59:51.390927" {
				t.Errorf("timestamp = %v", msg["timestamp"])
			}
			if msg["message_id"] != n.MessageID || len(n.MessageID) != 36 || n.MessageID[14] != '4' {
				t.Errorf("message_id %v is not the uuid4 %s", msg["message_id"], n.MessageID)
			}
			if u, _ := msg["_unique_id"].(string); len(u) != 32 {
				t.Errorf("_unique_id = %v", msg["_unique_id"])
			}
			if r, _ := msg["_context_request_id"].(string); !strings.HasPrefix(r, "req-") {
				t.Errorf("_context_request_id = %v", msg["_context_request_id"])
			}
			p := n.Publishing
			if p.ContentType != "application/json" || p.ContentEncoding != "utf-8" || p.DeliveryMode != 2 || p.MessageId != "" || !p.Timestamp.IsZero() {
				t.Errorf("properties differ from oslo's: %+v", p)
			}
			if tt.check != nil {
				tt.check(t, msg["payload"].(map[string]any))
			}
		})
	}
}

func TestPyTimestampWholeSecond(t *testing.T) {
	t.Parallel()
	// str(datetime) drops the fraction when microseconds are 0.
	if got := pyTimestamp(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); got != "2026-01-02 03:04:05" {
		t.Errorf("got %q", got)
	}
}

func TestUnknownSample(t *testing.T) {
	t.Parallel()
	if _, err := BuildNotification(Event{Type: "instance.nonsense.end"}, Versioned); err == nil {
		t.Fatal("want an error for a sample that does not exist")
	}
}
