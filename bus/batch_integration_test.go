package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/notification"
)

// batchHandler fails transient-1's release twice per delivery for the
// first two deliveries, rejects perm-1 for good and records every call.
type batchHandler struct {
	mu    sync.Mutex
	calls []string // "<instance> <kind> <outcome>"
	trN   int
}

func (h *batchHandler) Handle(ctx context.Context, c *command.Command) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	outcome, err := "ok", error(nil)
	switch {
	case c.InstanceUUID == "perm-1":
		outcome, err = "rejected", Permanent(errors.New("device retired"))
	case c.InstanceUUID == "transient-1" && c.Kind == command.KindRelease:
		if h.trN++; h.trN <= 3 {
			outcome, err = "failed", errors.New("placement unavailable")
		}
	}
	h.calls = append(h.calls, fmt.Sprintf("%s %s %s", c.InstanceUUID, c.Kind, outcome))
	return err
}

func (h *batchHandler) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// A message carrying several commands: each runs once, one instance's
// commands in order; a transient failure requeues the message without
// running the others again; what can never run is poisoned alone, once.
func TestIntakeBatchMessage(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.Retry.Attempts = 2 // transient-1 fails 3 calls: requeued twice, then ok
	h := &batchHandler{}
	startBus(t, cfg, "compute", h)

	el := func(inst, host string, kind command.Kind, msgID string) json.RawMessage {
		c := &command.Command{Version: command.Version, Kind: kind, Scope: command.ScopeHost, Host: host,
			InstanceUUID: inst, EventType: "test", Format: "scour", MessageID: msgID}
		b, err := command.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	body, err := command.MarshalBatch([][]byte{
		el("ok-1", "compute", command.KindRelease, "m-ok"),
		el("transient-1", "compute", command.KindRelease, "m-tr"),
		el("transient-1", "compute", command.KindClaim, "m-tr2"), // must wait for the release
		el("perm-1", "compute", command.KindRelease, "m-perm"),
		[]byte(`{"version": 1, "kind": "teleport", "scope": "host", "host": "compute"}`),
		el("mis-1", "elsewhere", command.KindRelease, "m-mis"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := confirmModeChannel(t, conn)
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), cfg.Exchange, HostKey("compute"), false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	waitFor(t, 30*time.Second, "the message worked off", func() bool {
		return h.count("transient-1 claim ok") == 1 && queueDepth(t, conn, cfg.HostQueue("compute")) == 0 &&
			queueDepth(t, conn, cfg.PoisonQueue) == 3
	})
	if n := h.count("ok-1 "); n != 1 {
		t.Errorf("ok-1 handled %d times, want once across the redeliveries", n)
	}
	if n := h.count("perm-1 "); n != 1 {
		t.Errorf("perm-1 handled %d times, want once (poisoned, then remembered)", n)
	}
	h.mu.Lock()
	var tr []string
	for _, c := range h.calls {
		if len(c) > 11 && c[:11] == "transient-1" {
			tr = append(tr, c)
		}
	}
	h.mu.Unlock()
	want := []string{"transient-1 release failed", "transient-1 release failed", "transient-1 release failed",
		"transient-1 release ok", "transient-1 claim ok"}
	if fmt.Sprint(tr) != fmt.Sprint(want) {
		t.Errorf("transient-1 calls %q, want %q (the claim never overtakes the release)", tr, want)
	}
	var reasons []string
	for _, d := range getAll(t, conn, cfg.PoisonQueue) {
		els, err := command.UnmarshalBatch(d.Body)
		if err != nil || len(els) != 1 {
			t.Errorf("poisoned body %s is not one element: %v", d.Body, err)
		}
		inst := ""
		if els[0].Command != nil {
			inst = els[0].Command.InstanceUUID
		}
		reasons = append(reasons, fmt.Sprintf("%v:%s", d.Headers[HeaderPoisonReason], inst))
	}
	sort.Strings(reasons)
	if want := "[handler_rejected:perm-1 invalid_command: misrouted:mis-1]"; fmt.Sprint(reasons) != want {
		t.Errorf("poison queue %v, want %s", reasons, want)
	}
}

// A burst of notifications for one host is dispatched in fewer messages
// than commands, and every command is handled exactly once.
func TestDispatchBatchesABurst(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	rec := &Recorder{Max: 10000}
	_, m := startBus(t, cfg, "compute", rec)
	ch := confirmModeChannel(t, conn)
	const n = 300
	for i := range n {
		id := fmt.Sprintf("burst-%03d", i)
		body := sample(t, "versioned/instance-delete-end.json", "m-"+id, func(d map[string]any) { d["uuid"] = id })
		// confirms pipelined: publish all, then wait
		if _, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), cfg.Nova.Exchange, "versioned_notifications.info", false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: mustOslo(t, body)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "every command handled", func() bool { return len(rec.Commands()) >= n })
	seen := map[string]int{}
	for _, c := range rec.Commands() {
		seen[c.InstanceUUID]++
	}
	for i := range n {
		if id := fmt.Sprintf("burst-%03d", i); seen[id] != 1 {
			t.Errorf("%s handled %d times", id, seen[id])
		}
	}
	count, sum := histogram(t, m.Registry, "scour_commands_batch_size")
	if sum != n || count >= n {
		t.Errorf("batch size histogram: %d messages carried %d commands; want %d commands in fewer messages", count, int(sum), n)
	}
	t.Logf("%d commands in %d messages", int(sum), count)
}

func mustOslo(t *testing.T, inner []byte) []byte {
	t.Helper()
	b, err := notification.EncodeOslo(inner)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// histogram returns a histogram's sample count and sum from reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}
