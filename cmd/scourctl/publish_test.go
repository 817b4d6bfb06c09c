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
	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/notification"
)

func TestPrepareSampleOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, publisher, key string
	}{
		{"../../notification/testdata/versioned/instance-delete-end.json", "nova-compute:cmp9", "versioned_notifications.info"},
		{"../../notification/testdata/legacy/compute.instance.delete.end.json", "compute.cmp9", "notifications.info"},
		// priority ERROR: oslo routes it to <topic>.error
		{"../../notification/testdata/versioned/instance-create-error.json", "nova-compute:cmp9", "versioned_notifications.error"},
		{"../../notification/testdata/legacy/compute.instance.create.error.json", "compute.cmp9", "notifications.error"},
	} {
		inner, _, key, err := prepareSample(tc.file, "cmp9", "11111111-2222-3333-4444-555555555555")
		if err != nil {
			t.Fatal(err)
		}
		if key != tc.key {
			t.Errorf("%s: routing key %s, want %s", tc.file, key, tc.key)
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

// publish-sample dials as scourd does: the first host of the URL is down,
// the second takes it.
func TestPublishSampleOnTheWire(t *testing.T) {
	conn := testkit.Broker(t)
	url := failoverURL(t, "", "")
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
// and leaves every one in the queue (no management plugin needed), however
// often it runs: the broker counts each listing as a delivery, and RabbitMQ
// 4 drops a message of a quorum queue without x-delivery-limit after 20,
// so the queue is declared as scourd declares it (bus.KeepQueueArgs).
func TestPoisonList(t *testing.T) {
	ch, q := poisonQueue(t, bus.KeepQueueArgs(&bus.Config{}))
	for i, body := range []string{"not json", `{"version": 1, "kind": "release", "host": "cmp9"}`, "third"} {
		h := amqp.Table{}
		if i != 1 {
			h[bus.HeaderPoisonReason], h["reason_poisoned"] = "not_json", "invalid character 'o' in literal null"
		}
		publishConfirmed(t, ch, q, amqp.Publishing{Body: []byte(body), Headers: h})
	}
	for i := 1; i <= 25; i++ {
		out, errb := poisonList(t, q)
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
			t.Fatalf("listing %d: %v: %s", i, err, out)
		}
		if rows[0]["reason"] != "not_json" || rows[0]["body"] != "not json" || rows[1]["reason"] != "unroutable-command" {
			t.Errorf("listing %d: rows %v", i, rows)
		}
		if errb != "" {
			t.Errorf("listing %d: stderr %q", i, errb)
		}
	}
	// A quorum queue counts a requeued message as ready a moment after the
	// listing's connection closed.
	testkit.WaitFor(t, 5*time.Second, "3 messages in the queue after 25 listings", func() bool {
		qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil && qi.Messages == 3
	})
}

// A poison queue an earlier scour declared has no delivery limit of its
// own; on RabbitMQ 4 each listing brings its messages one delivery closer
// to the default limit (20), so scourctl says so on stderr, with the
// policy to set. RabbitMQ 3 has no default limit: no warning there.
func TestPoisonListWarnsOnLegacyQueue(t *testing.T) {
	ch, q := poisonQueue(t, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	publishConfirmed(t, ch, q, amqp.Publishing{Body: []byte("old")})
	poisonList(t, q)
	out, errb := poisonList(t, q)
	if !strings.Contains(out, `"old"`) {
		t.Errorf("listing %s", out)
	}
	v := testkit.BrokerVersion(t)
	if broker.MajorVersion(v) < 4 {
		if errb != "" {
			t.Errorf("RabbitMQ %s has no default delivery limit, yet stderr says %q", v, errb)
		}
		return
	}
	for _, want := range []string{"warning: queue " + q + " was declared by an earlier scour without a delivery limit", "RabbitMQ " + v, "has had 1 before this one", "docs/operations.md (The poison queue)"} {
		if !strings.Contains(errb, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb)
		}
	}
}

// publishConfirmed publishes m to queue and waits for the broker's
// confirm, so a listing that follows sees it.
func publishConfirmed(t *testing.T, ch *amqp.Channel, queue string, m amqp.Publishing) {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, m)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("publish to %s not confirmed: %v", queue, err)
	}
}

// poisonQueue declares a durable poison queue with args for the test,
// deleted when it ends; its channel is in confirm mode.
func poisonQueue(t *testing.T, args amqp.Table) (*amqp.Channel, string) {
	t.Helper()
	conn := testkit.Broker(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q := "scour.poison.scourctl-" + uuid4()[:8]
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(q, false, false, false); ch.Close() })
	return ch, q
}

// poisonList runs `scourctl poison list --count 2 -o json` on queue.
func poisonList(t *testing.T, q string) (stdout, stderr string) {
	t.Helper()
	// scourd's bus.url and bus.tls, as every listing reads them: the first host down, the second
	// behind TLS with a certificate from bus.tls.ca_file for
	// bus.tls.server_name (not the address dialled).
	addr, ca := tlsBroker(t, "rmq.scour.test")
	cfg := filepath.Join(t.TempDir(), "scour.yaml")
	os.WriteFile(cfg, []byte("host: cmp1\nlifecycle: {enabled: false}\nbus:\n  url: "+failoverURL(t, addr, "?ssl=1")+
		"\n  tls: {ca_file: "+ca+", server_name: rmq.scour.test}\n  poison_queue: "+q+"\n"), 0o600)
	t.Setenv(configEnv, cfg)
	t.Setenv(envFileEnv, "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"poison", "list", "--count", "2", "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	return out.String(), errb.String()
}
