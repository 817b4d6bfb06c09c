package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
)

// TestPublishedNotificationIsDispatched is the README walk-through as a
// test: scourd wired by app.New against the real broker; a Nova sample
// published as oslo does shows up as a log line, a metric and a handled
// command.
func TestPublishedNotificationIsDispatched(t *testing.T) {
	conn := testkit.Broker(t) // closed after the queue clean-up below (cleanups run last-in first-out)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	environ := []string{
		"SCOUR_HOST=compute", "SCOUR_HTTP_ADDRESS=127.0.0.1:0", "SCOUR_BUS_URL=" + testkit.BrokerURL(),
		"SCOUR_BUS_NOVA_EXCHANGE=nova-app-" + id, "SCOUR_BUS_NOTIFICATIONS_QUEUE=scour.notifications.app-" + id,
		"SCOUR_BUS_EXCHANGE=scour-app-" + id, "SCOUR_BUS_HOST_QUEUE_PREFIX=scour.host.app-" + id + ".",
		"SCOUR_BUS_POISON_QUEUE=scour.poison.app-" + id, "SCOUR_BUS_SHUTDOWN_TIMEOUT=5s",
		"SCOUR_LIFECYCLE_ENABLED=false", // the notification path alone
	}
	cfg, err := config.Load("/nonexistent/scour.yaml", false, environ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, q := range []string{cfg.Bus.NotificationsQueue, cfg.Bus.PoisonQueue, cfg.Bus.HostQueue("compute")} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(cfg.Bus.Nova.Exchange, false, false)
		_ = ch.ExchangeDelete(cfg.Bus.Exchange, false, false)
	})
	logs := &testkit.SyncBuffer{}
	a, cleanup, err := New(cfg, NewLogger(cfg.Log, logs), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + a.HTTPAddr() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, "readyz 200", func() bool { code, _ := get("/readyz"); return code == 200 })

	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	inner, err := os.ReadFile("../notification/testdata/versioned/instance-delete-end.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := oslo.Publish(ctx, ch, cfg.Bus.Nova.Exchange, "versioned_notifications.info", inner); err != nil {
		t.Fatal(err)
	}
	rec := a.Handler.(*bus.Recorder)
	waitFor(t, "the command", func() bool { return len(rec.Commands()) == 1 })
	if c := rec.Commands()[0]; c.InstanceUUID != "178b0921-8f85-4257-88b6-2e743b5a975c" || c.Host != "compute" || c.Kind != "release" {
		t.Errorf("command %+v", c)
	}
	// the dispatcher counts and logs once the command's message was
	// confirmed, which can be after the intake already handled it
	waitFor(t, "the dispatch to be counted and logged", func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, `scour_commands_dispatched_total{kind="release"`) && strings.Contains(logs.String(), "notification dispatched")
	})
	_, metricsText := get("/metrics")
	for _, want := range []string{
		`scour_commands_dispatched_total{kind="release",scope="host"} 1`,
		`scour_notifications_received_total{event_type="instance.delete.end",format="versioned"} 1`,
		`scour_watermill_handler_execution_time_seconds_count`,
	} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var sawDispatch bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["msg"] == "notification dispatched" {
			sawDispatch = rec["instance"] == "178b0921-8f85-4257-88b6-2e743b5a975c" && rec["host"] == "compute" && rec["event"] == "instance.delete.end"
		}
		if strings.Contains(line, "guest:guest") {
			t.Errorf("log leaks the broker password: %s", line)
		}
	}
	if !sawDispatch {
		t.Errorf("no JSON 'notification dispatched' log line with instance/host/event:\n%s", logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop within 15s of cancel")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Log lines carry each key once and durations as people read them.
func TestLoggerUniqueKeysAndReadableDurations(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var b strings.Builder
		log := NewLogger(config.LogConfig{Level: "info", Format: format}, &b)
		log = log.With("host", "cmp1").With("component", "reconciler", "host", "cmp1")
		log.Info("scan", "took", 1500*time.Millisecond, "interval", 5*time.Minute)
		line := b.String()
		if n := strings.Count(line, "host"); n != 1 {
			t.Errorf("%s: host appears %d times: %s", format, n, line)
		}
		for _, want := range []string{"1.5s", "5m0s", "reconciler"} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: lacks %s: %s", format, want, line)
			}
		}
		if strings.Contains(line, "1500000000") {
			t.Errorf("%s: duration in nanoseconds: %s", format, line)
		}
	}
}

// bus.broadcast_routing: claims needs one PostgreSQL claims database for
// the fleet; auto routes only then; direct mode has no dispatcher.
func TestRouteBroadcastsNeedsSharedClaims(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newBus := func(t *testing.T, cfg *config.Config) *bus.Bus {
		b, err := bus.New(cfg.Bus, "compute", &bus.Recorder{}, metrics.New(), log)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pg := &lifecycle{}
	for _, tt := range []struct {
		name, routing, driver, mode string
		lc                          *lifecycle
		wantErr                     bool
	}{
		{"claims with sqlite", bus.RoutingClaims, claims.DriverSQLite, bus.ModeDispatch, pg, true},
		{"claims without lifecycle", bus.RoutingClaims, claims.DriverPostgres, bus.ModeDispatch, nil, true},
		{"claims with postgres", bus.RoutingClaims, claims.DriverPostgres, bus.ModeDispatch, pg, false},
		{"auto with sqlite", bus.RoutingAuto, claims.DriverSQLite, bus.ModeDispatch, pg, false},
		{"claims in direct mode", bus.RoutingClaims, claims.DriverSQLite, bus.ModeDirect, pg, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.Bus.BroadcastRouting, cfg.Bus.Mode, cfg.Claims.Driver = tt.routing, tt.mode, tt.driver
			err := routeBroadcasts(cfg, newBus(t, cfg), tt.lc, log)
			if (err != nil) != tt.wantErr {
				t.Errorf("routeBroadcasts = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "bus.broadcast_routing") {
				t.Errorf("error %q does not name bus.broadcast_routing", err)
			}
		})
	}
}
