package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountersGolden(t *testing.T) {
	t.Parallel()
	m := New()
	m.NotificationReceived("instance.delete.end", "versioned")
	m.NotificationReceived("instance.delete.end", "versioned")
	m.NotificationReceived("compute.instance.delete.end", "legacy")
	m.NotificationIgnored()
	m.Poisoned("not_json")
	m.CommandDispatched("release", "host")
	m.CommandDispatched("revert", "broadcast")
	const want = `
# HELP scour_commands_dispatched_total Commands published to scour's exchange (broker-confirmed), by kind and scope.
# TYPE scour_commands_dispatched_total counter
scour_commands_dispatched_total{kind="release",scope="host"} 1
scour_commands_dispatched_total{kind="revert",scope="broadcast"} 1
# HELP scour_notifications_ignored_total Notifications acknowledged without action (event types scour does not act on).
# TYPE scour_notifications_ignored_total counter
scour_notifications_ignored_total 1
# HELP scour_notifications_poisoned_total Messages moved to the poison queue, by reason.
# TYPE scour_notifications_poisoned_total counter
scour_notifications_poisoned_total{reason="not_json"} 1
# HELP scour_notifications_received_total Notifications decoded, by event type and Nova format (versioned, legacy).
# TYPE scour_notifications_received_total counter
scour_notifications_received_total{event_type="compute.instance.delete.end",format="legacy"} 1
scour_notifications_received_total{event_type="instance.delete.end",format="versioned"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"scour_commands_dispatched_total", "scour_notifications_ignored_total",
		"scour_notifications_poisoned_total", "scour_notifications_received_total"); err != nil {
		t.Error(err)
	}
}

func TestHandlerDurationHistogram(t *testing.T) {
	t.Parallel()
	m := New()
	m.CommandHandled("release", "ok", 3*time.Millisecond)
	m.CommandHandled("release", "ok", 2*time.Second)
	if n := testutil.CollectAndCount(m.handled, "scour_commands_handler_duration_seconds"); n != 1 {
		t.Errorf("%d series, want 1", n)
	}
	const want = `
# HELP scour_commands_handler_duration_seconds Time the command handler took, by kind and outcome (ok, retried, poisoned, duplicate).
# TYPE scour_commands_handler_duration_seconds histogram
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="0.001"} 0
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="0.004"} 1
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="0.016"} 1
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="0.064"} 1
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="0.256"} 1
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="1.024"} 1
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="4.096"} 2
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="16.384"} 2
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="65.536"} 2
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="262.144"} 2
scour_commands_handler_duration_seconds_bucket{kind="release",outcome="ok",le="+Inf"} 2
scour_commands_handler_duration_seconds_sum{kind="release",outcome="ok"} 2.003
scour_commands_handler_duration_seconds_count{kind="release",outcome="ok"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "scour_commands_handler_duration_seconds"); err != nil {
		t.Error(err)
	}
}

func TestEventTypeCardinalityIsBounded(t *testing.T) {
	t.Parallel()
	m := New()
	for i := range maxEventTypes + 50 {
		m.NotificationReceived(fmt.Sprintf("junk.%d", i), "legacy")
	}
	if n := testutil.CollectAndCount(m.received); n != maxEventTypes+1 {
		t.Errorf("%d series, want %d (+1 for %q)", n, maxEventTypes+1, OtherEventType)
	}
	if v := testutil.ToFloat64(m.received.WithLabelValues(OtherEventType, "legacy")); v != 50 {
		t.Errorf("other = %v, want 50", v)
	}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	m := New()
	m.NotificationIgnored()
	var ready atomic.Bool
	srv := httptest.NewServer(m.Handler(func() error {
		if !ready.Load() {
			return errors.New("not connected to the broker")
		}
		return nil
	}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not connected") {
		t.Errorf("/readyz %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "scour_notifications_ignored_total 1") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics %d:\n%.300s", code, body)
	}
}
