package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/notification"
)

func TestPrepareSampleOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, publisher string
	}{
		{"../../notification/testdata/versioned/instance-delete-end.json", "nova-compute:cmp9"},
		{"../../notification/testdata/legacy/compute.instance.delete.end.json", "compute.cmp9"},
	} {
		inner, _, err := prepareSample(tc.file, "cmp9", "11111111-2222-3333-4444-555555555555")
		if err != nil {
			t.Fatal(err)
		}
		body, err := oslo.Encode(inner)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := notification.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Host != "cmp9" || ev.PublisherHost != "cmp9" || ev.InstanceUUID != "11111111-2222-3333-4444-555555555555" ||
			ev.MessageID == "" || ev.RequestID == "" || time.Since(ev.Timestamp) > time.Minute {
			t.Errorf("%s: %+v", tc.file, ev)
		}
		var m map[string]any
		_ = json.Unmarshal(inner, &m)
		if m["publisher_id"] != tc.publisher {
			t.Errorf("publisher_id %v, want %s", m["publisher_id"], tc.publisher)
		}
	}
}

func TestPublishSampleOnTheWire(t *testing.T) {
	conn := testkit.Broker(t)
	url := testkit.BrokerURL()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ex := "nova-scourctl-" + uuid4()[:8]
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(ex, false, false)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "notifications.info", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"publish-sample", "--url", url, "--exchange", ex, "--host", "cmp3",
		"../../notification/testdata/legacy/compute.instance.shelve_offload.end.json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	d, ok, err := ch.Get(q.Name, true)
	if err != nil || !ok {
		t.Fatalf("nothing published on notifications.info: %v", err)
	}
	if d.ContentType != "application/json" || d.ContentEncoding != "utf-8" || d.DeliveryMode != 2 ||
		!strings.HasPrefix(string(d.Body), `{"oslo.version": "2.0", "oslo.message": "{\"`) {
		t.Errorf("not oslo wire form: %q %q %d %s", d.ContentType, d.ContentEncoding, d.DeliveryMode, d.Body)
	}
	ev, err := notification.Decode(d.Body)
	if err != nil || ev.Kind != "shelve-offload" || ev.PublisherHost != "cmp3" {
		t.Errorf("decoded %+v, %v", ev, err)
	}
}

// scourctl poison list shows the poison queue's messages with their reason
// and leaves every one in the queue (no management plugin needed).
func TestPoisonList(t *testing.T) {
	conn := testkit.Broker(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q := "scour.poison.scourctl-" + uuid4()[:8]
	if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(q, false, false, false)
	for i, body := range []string{"not json", `{"version": 1, "kind": "release", "host": "cmp9"}`, "third"} {
		h := amqp.Table{}
		if i != 1 {
			h[bus.HeaderPoisonReason], h["reason_poisoned"] = "not_json", "invalid character 'o' in literal null"
		}
		if err := ch.Publish("", q, false, false, amqp.Publishing{Body: []byte(body), Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "scour.yaml")
	os.WriteFile(cfg, []byte("host: cmp1\nlifecycle: {enabled: false}\nbus:\n  url: "+testkit.BrokerURL()+"\n  poison_queue: "+q+"\n"), 0o600)
	t.Setenv(configEnv, cfg)
	t.Setenv(envFileEnv, "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"poison", "list", "--count", "2", "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rows[0]["reason"] != "not_json" || rows[0]["body"] != "not json" || rows[1]["reason"] != "unroutable-command" {
		t.Errorf("rows %v", rows)
	}
	qi, err := ch.QueueDeclarePassive(q, false, true, false, false, nil)
	if err != nil || qi.Messages != 3 {
		t.Errorf("the queue holds %d messages after the listing, want 3 (%v)", qi.Messages, err)
	}
}
