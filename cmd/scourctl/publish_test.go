package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
		body, err := notification.EncodeOslo(inner)
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
