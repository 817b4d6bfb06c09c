package bus

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
)

// Integration tests run against the real broker (127.0.0.1:5672, or
// SCOUR_TEST_AMQP_URL). They FAIL when it is unreachable; only
// `go test -short` skips them. Every test uses names of its own and
// deletes them, because other engineers' tests share the broker.

// uid is a UUID named by s (instance ids must be UUIDs).
func uid(s string) string {
	h := md5.Sum([]byte(s))
	x := hex.EncodeToString(h[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

func uniq() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testConfig gives every name a unique suffix and removes them afterwards.
func testConfig(t *testing.T, conn *amqp.Connection) Config {
	t.Helper()
	id := uniq()
	cfg := Config{
		URL:                testkit.BrokerURL(),
		Nova:               NovaConfig{Exchange: "nova-test-" + id},
		NotificationsQueue: "scour.notifications." + id,
		Exchange:           "scour-test-" + id,
		HostQueuePrefix:    "scour.host." + id + ".",
		PoisonQueue:        "scour.poison." + id,
		Workers:            2,
		ShutdownTimeout:    5 * time.Second,
		Retry:              RetryConfig{Attempts: 3, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
	}
	cfg.SetDefaults()
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, q := range []string{cfg.NotificationsQueue, cfg.PoisonQueue, cfg.HostQueue("compute"), cfg.HostQueue("host2"), cfg.NotificationsQueue + ".compute", cfg.UnroutableQueue()} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(cfg.Nova.Exchange, false, false)
		_ = ch.ExchangeDelete(cfg.Exchange, false, false)
		_ = ch.ExchangeDelete(cfg.UnroutableExchange(), false, false)
	})
	return cfg
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startBus runs a bus until the test ends and waits until it consumes.
func startBus(t *testing.T, cfg Config, host string, h CommandHandler) (*Bus, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	b, err := New(cfg, host, h, m, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runBus(t, b)
	return b, m
}

// runBus runs b until the test ends and waits until it consumes.
func runBus(t *testing.T, b *Bus) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("bus did not stop within 15s")
		}
	})
	waitFor(t, 20*time.Second, "bus ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		return b.Ready() == nil
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, d, what, cond)
}

func confirmModeChannel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

// sample reads a Nova sample from notification/testdata, sets the keys
// oslo adds and applies edits to payload["nova_object.data"].
func sample(t testing.TB, name, messageID string, edit func(data map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile("../notification/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["message_id"] = messageID
	m["timestamp"] = "2026-11-22 02:59:51.390927"
	m["_unique_id"] = strings.ReplaceAll(messageID, "-", "")
	m["_context_request_id"] = "req-" + messageID
	if edit != nil {
		if p, ok := m["payload"].(map[string]any); ok {
			if d, ok := p["nova_object.data"].(map[string]any); ok {
				edit(d)
			}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// getAll drains a queue (basic.get), returning the deliveries.
func getAll(t *testing.T, conn *amqp.Connection, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func queueDepth(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

func byInstance(cmds []command.Command) map[string][]command.Command {
	out := map[string][]command.Command{}
	for _, c := range cmds {
		out[c.InstanceUUID] = append(out[c.InstanceUUID], c)
	}
	return out
}

func TestDispatchToHostsBroadcastAndPoison(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	compute, host2 := &Recorder{}, &Recorder{}
	_, mCompute := startBus(t, cfg, "compute", compute)
	startBus(t, cfg, "host2", host2)

	ch := confirmModeChannel(t, conn)
	ctx := context.Background()
	pub := func(key string, inner []byte) {
		t.Helper()
		if err := oslo.Publish(ctx, ch, cfg.Nova.Exchange, key, inner); err != nil {
			t.Fatal(err)
		}
	}
	pub("versioned_notifications.info", sample(t, "versioned/instance-delete-end.json", "m-delete", func(d map[string]any) { d["uuid"] = uid("i-delete") }))
	pub("versioned_notifications.info", sample(t, "versioned/instance-live_migration_post_dest-end.json", "m-dest", func(d map[string]any) { d["uuid"] = uid("i-dest") }))
	pub("versioned_notifications.info", sample(t, "versioned/instance-resize_revert-end.json", "m-revert", func(d map[string]any) { d["uuid"] = uid("i-revert") }))
	pub("versioned_notifications.info", sample(t, "versioned/instance-delete-end_not_scheduled.json", "m-api", func(d map[string]any) { d["uuid"] = uid("i-api-delete") }))
	pub("versioned_notifications.info", sample(t, "versioned/instance-shelve_offload-end.json", "m-shelve", func(d map[string]any) { d["uuid"] = uid("i-shelve") }))
	pub("notifications.info", sample(t, "legacy/compute.instance.volume.detach.json", "m-legacy", nil))
	pub("versioned_notifications.info", sample(t, "versioned/instance-update.json", "m-update", nil)) // ignored
	// garbage, and a relevant event without an instance
	if err := oslo.PublishRaw(ctx, ch, cfg.Nova.Exchange, "versioned_notifications.info", []byte("this is not json")); err != nil {
		t.Fatal(err)
	}
	pub("versioned_notifications.info", []byte(`{"event_type": "instance.delete.end", "publisher_id": "nova-compute:compute", "payload": {"nova_object.data": {"host": "compute"}}}`))
	// an instance id that is a path: rejected at decode, never retried
	pub("versioned_notifications.info", sample(t, "versioned/instance-delete-end.json", "m-path", func(d map[string]any) { d["uuid"] = "../../etc/passwd" }))
	// a routing key scour did not bind: never seen
	pub("versioned_notifications.warn", sample(t, "versioned/instance-delete-end.json", "m-error", func(d map[string]any) { d["uuid"] = uid("i-unbound") }))

	// compute: delete, revert (broadcast), api delete (broadcast), shelve (publisher host), legacy detach.
	// host2: post_dest, revert, api delete.
	waitFor(t, 20*time.Second, "commands on both hosts", func() bool {
		return len(compute.Commands()) >= 5 && len(host2.Commands()) >= 3
	})
	time.Sleep(300 * time.Millisecond) // nothing more may arrive
	got := map[string]map[string][]command.Command{"compute": byInstance(compute.Commands()), "host2": byInstance(host2.Commands())}
	want := map[string]map[string]command.Kind{
		"compute": {uid("i-delete"): command.KindRelease, uid("i-revert"): command.KindRevert, uid("i-api-delete"): command.KindRelease, uid("i-shelve"): command.KindShelveOffload, "178b0921-8f85-4257-88b6-2e743b5a975c": command.KindVolume},
		"host2":   {uid("i-dest"): command.KindClaim, uid("i-revert"): command.KindRevert, uid("i-api-delete"): command.KindRelease},
	}
	for host, cmds := range want {
		if len(got[host]) != len(cmds) {
			t.Errorf("%s got commands for %d instances, want %d: %v", host, len(got[host]), len(cmds), got[host])
		}
		for inst, kind := range cmds {
			cs := got[host][inst]
			if len(cs) != 1 || cs[0].Kind != kind {
				t.Errorf("%s instance %s: got %+v, want one %s command", host, inst, cs, kind)
			}
		}
	}
	if c := got["compute"][uid("i-revert")]; len(c) == 1 && c[0].Scope != command.ScopeBroadcast {
		t.Errorf("resize_revert must be a broadcast: %+v", c[0])
	}

	waitFor(t, 10*time.Second, "3 poisoned messages", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) >= 3 })
	reasons := map[string]string{}
	for _, d := range getAll(t, conn, cfg.PoisonQueue) {
		reasons[fmt.Sprint(d.Headers[HeaderPoisonReason])] = string(d.Body)
		if d.Headers["reason_poisoned"] == nil {
			t.Errorf("poisoned message lacks reason_poisoned header: %v", d.Headers)
		}
	}
	if reasons["not_json"] != "this is not json" {
		t.Errorf("garbage not poisoned byte-exact with reason not_json: %q", reasons)
	}
	if !strings.Contains(reasons["invalid_id"], "../../etc/passwd") {
		t.Errorf("the path instance id was not poisoned with reason invalid_id: %q", reasons)
	}
	if _, ok := reasons["missing_instance_uuid"]; !ok || len(reasons) != 3 {
		t.Errorf("poison reasons %v, want not_json, missing_instance_uuid and invalid_id", keys(reasons))
	}
	// Everything was acked: nothing left in scour's queues.
	for _, q := range []string{cfg.NotificationsQueue, cfg.HostQueue("compute"), cfg.HostQueue("host2")} {
		if n := queueDepth(t, conn, q); n != 0 {
			t.Errorf("%s still holds %d messages", q, n)
		}
	}
	// watermill's router metrics, under the names dashboards use
	names := map[string]bool{}
	mfs, err := mCompute.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"scour_watermill_handler_execution_time_seconds", "scour_watermill_subscriber_messages_received_total"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
}

// Nova sends instance.create.error and compute.instance.create.error at
// priority ERROR, which oslo routes as <topic>.error: the default routing
// keys must bind them, or the scan after a failed build never happens.
func TestErrorPriorityNotificationsDispatched(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn) // the default bus.nova.routing_keys
	compute := &Recorder{}
	startBus(t, cfg, "compute", compute)
	ch := confirmModeChannel(t, conn)
	for _, p := range []struct{ key, sample, id string }{
		{"versioned_notifications.error", "versioned/instance-create-error.json", "m-create-error"},
		{"notifications.error", "legacy/compute.instance.create.error.json", "m-legacy-create-error"},
	} {
		if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, p.key, sample(t, p.sample, p.id, nil)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "both create.error notifications dispatched", func() bool { return len(compute.Commands()) >= 2 })
	got := map[string]command.Kind{}
	for _, c := range compute.Commands() {
		got[c.EventType] = c.Kind
	}
	for _, et := range []string{"instance.create.error", "compute.instance.create.error"} {
		if got[et] != command.KindReconcile {
			t.Errorf("%s: got %q, want a reconcile command for host compute (all: %v)", et, got[et], got)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestExchangeMismatchIsReportedOnce(t *testing.T) {
	conn := testkit.Broker(t)
	for _, tc := range []struct {
		name    string
		prepare func(ch *amqp.Channel, cfg *Config) error
		setting string
		code    int
	}{
		{"durable mismatch", func(ch *amqp.Channel, cfg *Config) error {
			// Nova with amqp_durable_queues=true; scour left at the default.
			return ch.ExchangeDeclare(cfg.Nova.Exchange, "topic", true, false, false, false, nil)
		}, "bus.nova.durable", 406},
		{"passive, exchange missing", func(_ *amqp.Channel, cfg *Config) error {
			cfg.Nova.Passive = true
			return nil
		}, "bus.nova.passive", 404},
		{"classic queue exists", func(ch *amqp.Channel, cfg *Config) error {
			_, err := ch.QueueDeclare(cfg.NotificationsQueue, true, false, false, false, nil)
			return err
		}, "bus.notifications_queue", 406},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, conn)
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			if err := tc.prepare(ch, &cfg); err != nil {
				t.Fatal(err)
			}
			b, err := New(cfg, "compute", &Recorder{}, metrics.New(), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err = b.Run(ctx)
			var te *TopologyError
			if !errors.As(err, &te) {
				t.Fatalf("Run = %v, want a *TopologyError", err)
			}
			t.Logf("reported: %v", err)
			if te.Err.Code != tc.code || !strings.Contains(err.Error(), tc.setting) {
				t.Errorf("error %q: want code %d naming %s", err, tc.code, tc.setting)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("Run took %s to report a configuration error", time.Since(start))
			}
			if strings.Contains(err.Error(), "guest:guest") {
				t.Errorf("error leaks credentials: %v", err)
			}
		})
	}
}

// flaky fails the first n calls per instance with a transient error.
type flaky struct {
	mu    sync.Mutex
	fails map[string]int
	n     int
	rec   Recorder
}

func (f *flaky) Handle(ctx context.Context, c *command.Command) error {
	f.mu.Lock()
	f.fails[c.InstanceUUID]++
	k := f.fails[c.InstanceUUID]
	f.mu.Unlock()
	switch {
	case c.InstanceUUID == uid("perm-1"):
		return Permanent(errors.New("device retired"))
	case k <= f.n:
		return errors.New("placement unavailable")
	}
	return f.rec.Handle(ctx, c)
}

func TestHandlerErrorClassification(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.Retry.Attempts = 2 // 2 in-process attempts, then requeue
	h := &flaky{fails: map[string]int{}, n: 3}
	_, m := startBus(t, cfg, "compute", h)
	ch := confirmModeChannel(t, conn)
	ctx := context.Background()
	for _, id := range []string{"transient-1", "perm-1"} {
		if err := oslo.Publish(ctx, ch, cfg.Nova.Exchange, "versioned_notifications.info",
			sample(t, "versioned/instance-delete-end.json", "m-"+id, func(d map[string]any) { d["uuid"] = uid(id) })); err != nil {
			t.Fatal(err)
		}
	}
	// transient-1 fails 3 times: 2 attempts, requeue, then succeeds on the 4th call.
	waitFor(t, 20*time.Second, "transient command handled", func() bool { return len(h.rec.Commands()) == 1 })
	waitFor(t, 10*time.Second, "permanent failure poisoned", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) == 1 })
	d := getAll(t, conn, cfg.PoisonQueue)
	if len(d) != 1 || d[0].Headers[HeaderPoisonReason] != "handler_rejected" {
		t.Fatalf("poison queue: %v", d)
	}
	var c command.Command
	if err := json.Unmarshal(d[0].Body, &c); err != nil || c.InstanceUUID != uid("perm-1") {
		t.Errorf("poisoned body %s: %v", d[0].Body, err)
	}
	h.mu.Lock()
	if h.fails[uid("perm-1")] != 1 || h.fails[uid("transient-1")] != 4 {
		t.Errorf("calls: %v (want perm-1 once, transient-1 4 times)", h.fails)
	}
	h.mu.Unlock()
	_ = m
}
