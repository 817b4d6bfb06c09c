package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/version"
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
# HELP scour_notifications_received_total Notifications decoded, by event type and Nova format (versioned, legacy).
# TYPE scour_notifications_received_total counter
scour_notifications_received_total{event_type="compute.instance.delete.end",format="legacy"} 1
scour_notifications_received_total{event_type="instance.delete.end",format="versioned"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"scour_commands_dispatched_total", "scour_notifications_ignored_total",
		"scour_notifications_received_total"); err != nil {
		t.Error(err)
	}
	if v := testutil.ToFloat64(m.poisoned.WithLabelValues("not_json")); v != 1 {
		t.Errorf("poisoned{not_json} = %v, want 1", v)
	}
}

// Every poison reason is exported at 0 before its first message, so an
// alert on increase() sees the first one; scour_build_info says which
// build runs.
func TestPoisonedAtZeroAndBuildInfo(t *testing.T) {
	t.Parallel()
	m := New()
	var want strings.Builder
	want.WriteString("# HELP scour_notifications_poisoned_total Messages moved to the poison queue, by reason.\n# TYPE scour_notifications_poisoned_total counter\n")
	reasons := append([]string{}, PoisonReasons...)
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(&want, "scour_notifications_poisoned_total{reason=%q} 0\n", r)
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want.String()), "scour_notifications_poisoned_total"); err != nil {
		t.Error(err)
	}
	bi := fmt.Sprintf("# HELP scour_build_info Always 1; the labels say which scour build runs (version) and with which Go (goversion).\n"+
		"# TYPE scour_build_info gauge\nscour_build_info{goversion=%q,version=%q} 1\n", runtime.Version(), version.Version)
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(bi), "scour_build_info"); err != nil {
		t.Error(err)
	}
	for _, n := range []string{"scour_build_info", "go_goroutines", "process_cpu_seconds_total"} {
		if !slices.Contains(m.Names(), n) {
			t.Errorf("Names() lacks %s: %v", n, m.Names())
		}
	}
}

// PoisonReasons covers every notification.Reason (read from its source,
// as metrics must not import the decoder).
func TestPoisonReasonsCoverTheDecoder(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../notification/errors.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := regexp.MustCompile(`(?m)^\s+Reason\w+\s+Reason = "([^"]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(consts) < 10 {
		t.Fatalf("found %d Reason constants in notification/errors.go; the pattern is stale", len(consts))
	}
	for _, c := range consts {
		if !slices.Contains(PoisonReasons, c[1]) {
			t.Errorf("PoisonReasons lacks notification's reason %q", c[1])
		}
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
