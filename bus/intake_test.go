package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/notification"
)

// script fails transient-1's release transiently for its first 3 calls and
// records every call.
type script struct {
	mu    sync.Mutex
	calls []string // "<instance name> <kind> <outcome>"
	trN   int
}

func (h *script) Handle(ctx context.Context, c *command.Command) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := c.InstanceUUID
	for _, n := range []string{"ok-1", "ok-2", "transient-1", "panic-1", "after-1", "after-2"} {
		if uid(n) == c.InstanceUUID {
			name = n
		}
	}
	outcome, err := "ok", error(nil)
	switch {
	case name == "panic-1":
		h.calls = append(h.calls, "panic-1 "+string(c.Kind)+" panicked")
		panic("handler bug")
	case name == "transient-1" && c.Kind == command.KindRelease:
		if h.trN++; h.trN <= 3 {
			outcome, err = "failed", errors.New("placement unavailable")
		}
	}
	h.calls = append(h.calls, fmt.Sprintf("%s %s %s", name, c.Kind, outcome))
	return err
}

func (h *script) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func cmdJSON(t *testing.T, inst, host string, kind command.Kind, msgID string) string {
	t.Helper()
	b, err := command.Marshal(&command.Command{Version: command.Version, Kind: kind, Scope: command.ScopeHost, Host: host,
		InstanceUUID: uid(inst), EventType: "test", Format: "scour", MessageID: msgID})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func publishCommand(t *testing.T, ch *amqp.Channel, cfg Config, host, body string) {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), cfg.Exchange, HostKey(host), false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}
}

// Rolling upgrade: the array form older dispatchers sent is still taken.
// Each command runs once, in message order (the claim never overtakes the
// release); a transient failure requeues the message without running the
// handled commands again.
func TestIntakeAcceptsArrayForm(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	cfg.Retry.Attempts = 2 // transient-1 fails 3 calls: requeued once, then ok
	h := &script{}
	startBus(t, cfg, "compute", h)
	ch := confirmModeChannel(t, conn)
	publishCommand(t, ch, cfg, "compute", "["+strings.Join([]string{
		cmdJSON(t, "ok-1", "compute", command.KindRelease, "m-ok"),
		cmdJSON(t, "transient-1", "compute", command.KindRelease, "m-tr"),
		cmdJSON(t, "transient-1", "compute", command.KindClaim, "m-tr2"),
	}, ",")+"]")
	waitFor(t, 30*time.Second, "the message worked off", func() bool {
		return h.count("transient-1 claim ok") == 1 && queueDepth(t, conn, cfg.HostQueue("compute")) == 0
	})
	h.mu.Lock()
	got := fmt.Sprint(h.calls)
	h.mu.Unlock()
	want := fmt.Sprint([]string{"ok-1 release ok", "transient-1 release failed", "transient-1 release failed",
		"transient-1 release failed", "transient-1 release ok", "transient-1 claim ok"})
	if got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if n := queueDepth(t, conn, cfg.PoisonQueue); n != 0 {
		t.Errorf("%d messages poisoned", n)
	}
}

// An array with a command that can never run: the others run, then the
// message goes to the poison queue, once, with the reason of the bad one.
func TestIntakeArrayWithInvalidCommand(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	h := &script{}
	startBus(t, cfg, "compute", h)
	ch := confirmModeChannel(t, conn)
	body := "[" + cmdJSON(t, "ok-2", "compute", command.KindRelease, "m-ok2") + `, {"version": 1, "kind": "teleport", "scope": "host", "host": "compute"}]`
	publishCommand(t, ch, cfg, "compute", body)
	waitFor(t, 20*time.Second, "the message poisoned", func() bool { return queueDepth(t, conn, cfg.PoisonQueue) == 1 })
	d := getAll(t, conn, cfg.PoisonQueue)
	if len(d) != 1 || d[0].Headers[HeaderPoisonReason] != "invalid_command" || string(d[0].Body) != body {
		t.Fatalf("poison queue %v, want the whole message with reason invalid_command", d)
	}
	if !strings.Contains(fmt.Sprint(d[0].Headers["reason_poisoned"]), "command 2 of the 2") {
		t.Errorf("reason_poisoned %q does not name the command", d[0].Headers["reason_poisoned"])
	}
	if n := h.count("ok-2 release ok"); n != 1 {
		t.Errorf("the valid command ran %d times, want once", n)
	}
}

// A panic in decoding a notification, in decoding a command, or in a
// handler poisons that message with reason "panic"; the bus keeps serving
// the messages behind it.
func TestPanicsArePoisonedAndTheBusKeepsServing(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	h := &script{}
	m := metrics.New()
	b, err := New(cfg, "compute", h, m, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	decodeEvent, decodeCommands := b.decodeEvent, b.decodeCommands
	b.decodeEvent = func(body []byte) (*notification.Event, error) {
		if strings.Contains(string(body), "m-decode-panic") {
			panic("decoder bug")
		}
		return decodeEvent(body)
	}
	b.decodeCommands = func(body []byte) ([]command.Element, error) {
		if strings.Contains(string(body), "m-intake-panic") {
			panic("command decoder bug")
		}
		return decodeCommands(body)
	}
	runBus(t, b)
	ch := confirmModeChannel(t, conn)
	pub := func(msgID, inst string) {
		t.Helper()
		if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "versioned_notifications.info",
			sample(t, "versioned/instance-delete-end.json", msgID, func(d map[string]any) { d["uuid"], d["host"] = uid(inst), "compute" })); err != nil {
			t.Fatal(err)
		}
	}
	pub("m-decode-panic", "x")
	publishCommand(t, ch, cfg, "compute", cmdJSON(t, "y", "compute", command.KindRelease, "m-intake-panic"))
	pub("m-handler-panic", "panic-1")
	pub("m-after-1", "after-1")
	publishCommand(t, ch, cfg, "compute", cmdJSON(t, "after-2", "compute", command.KindRelease, "m-after-2"))

	waitFor(t, 30*time.Second, "3 poisoned messages and the later ones handled", func() bool {
		return queueDepth(t, conn, cfg.PoisonQueue) == 3 && h.count("after-1 release ok") == 1 && h.count("after-2 release ok") == 1
	})
	var reasons []string
	for _, d := range getAll(t, conn, cfg.PoisonQueue) {
		reasons = append(reasons, fmt.Sprint(d.Headers[HeaderPoisonReason]))
		if !strings.Contains(fmt.Sprint(d.Headers["reason_poisoned"]), "bug") {
			t.Errorf("reason_poisoned %q does not carry the panic value", d.Headers["reason_poisoned"])
		}
	}
	if fmt.Sprint(reasons) != "[panic panic panic]" {
		t.Errorf("poison reasons %v, want three panics", reasons)
	}
	if n := h.count("panic-1 "); n != 1 {
		t.Errorf("the panicking handler ran %d times, want once (a panic is not retried)", n)
	}
	if err := b.Ready(); err != nil {
		t.Errorf("bus not ready after the panics: %v", err)
	}
	if n := poisonedCount(t, m, "panic"); n != 3 {
		t.Errorf("scour_notifications_poisoned_total{reason=panic} = %v, want 3", n)
	}
}

func poisonedCount(t *testing.T, m *metrics.Metrics, reason string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "scour_notifications_poisoned_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
