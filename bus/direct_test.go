package bus

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/metrics"
)

// A host mismatch in direct mode (scour's host cmp1 where Nova says
// cmp1.example.com) drops every event: the first command for each other
// name is a WARN, the rest INFO. No broker needed: handle is called
// directly.
func TestDirectModeWarnsOncePerOtherHost(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	b, err := New(Config{Mode: ModeDirect}, "cmp1", &Recorder{}, metrics.New(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d := &direct{b: b}
	for i, id := range []string{"m-1", "m-2", "m-3"} {
		inner := sample(t, "versioned/instance-live_migration_post_dest-end.json", id, func(d map[string]any) { d["uuid"] = uid(id) }) // host2
		if i == 2 {
			inner = sample(t, "versioned/instance-delete-end.json", id, func(d map[string]any) { d["uuid"] = uid(id); d["host"] = "cmp1.example.com" })
		}
		body, err := oslo.Encode(inner)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.handle(message.NewMessage(id, body)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	var warns, infos []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case strings.Contains(l, "level=WARN") && strings.Contains(l, "another host"):
			warns = append(warns, l)
		case strings.Contains(l, "level=INFO") && strings.Contains(l, "another host"):
			infos = append(infos, l)
		}
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "target=host2") || !strings.Contains(warns[1], "target=cmp1.example.com") ||
		!strings.Contains(warns[1], "SCOUR_HOST") || len(infos) != 1 {
		t.Errorf("want one WARN per other host (host2, cmp1.example.com) and one INFO for host2's repeat; got:\n%s", logs.String())
	}
}

// In direct mode every host must consume a queue of its own: a custom
// bus.notifications_queue shared by a fleet-wide config would hand each
// host the others' notifications, which it acks and ignores. A custom
// name must therefore name the host with {host}; the default gets .<host>.
func TestDirectModeNotificationsQueuePerHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, name string
		want       map[string]string // host -> queue; nil: New must refuse the config
		refusal    string
	}{
		{ModeDirect, "", map[string]string{"cmp1": "scour.notifications.cmp1", "cmp2": "scour.notifications.cmp2"}, ""},
		{ModeDirect, "scour.notifications", map[string]string{"cmp1": "scour.notifications.cmp1"}, ""},
		{ModeDirect, "scour-{host}-notifications", map[string]string{"cmp1": "scour-cmp1-notifications", "cmp2": "scour-cmp2-notifications"}, ""},
		{ModeDirect, "site-a.notifications", nil, `"site-a.notifications.{host}"`},
		{ModeDispatch, "site-a.notifications", map[string]string{"cmp1": "site-a.notifications", "cmp2": "site-a.notifications"}, ""},
		{ModeDispatch, "scour.notifications.{host}", nil, "direct mode only"},
	} {
		for host, want := range tc.want {
			b, err := New(Config{Mode: tc.mode, NotificationsQueue: tc.name}, host, &Recorder{}, metrics.New(), testLogger(t))
			if err != nil {
				t.Errorf("%s %q on %s: %v", tc.mode, tc.name, host, err)
				continue
			}
			if got := b.NotificationsQueue(); got != want {
				t.Errorf("%s %q on %s: queue %q, want %q", tc.mode, tc.name, host, got, want)
			}
		}
		if tc.want == nil {
			_, err := New(Config{Mode: tc.mode, NotificationsQueue: tc.name}, "cmp1", &Recorder{}, metrics.New(), testLogger(t))
			if err == nil || !strings.Contains(err.Error(), "bus.notifications_queue") || !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("%s %q: got %v, want a bus.notifications_queue error saying %s", tc.mode, tc.name, err, tc.refusal)
			}
		}
	}
}
