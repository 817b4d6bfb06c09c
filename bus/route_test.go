package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/metrics"
)

// hostsOf is a HostResolver over a fixed table; an instance named in
// failing makes the lookup fail.
type hostsOf struct {
	hosts   map[string][]string
	failing string
}

func (r hostsOf) LiveClaimHosts(_ context.Context, instance string) ([]string, error) {
	if instance == r.failing {
		return nil, errors.New("claims database unreachable")
	}
	return r.hosts[instance], nil
}

// A routed broadcast reaches only the hosts the claims database names,
// once each, and keeps its broadcast scope (the receiver acts only where
// it holds a live claim); a lookup that finds nobody or fails falls back
// to every host. The real broker routes.
func TestBroadcastRouting(t *testing.T) {
	conn := testkit.Broker(t)
	cfg := testConfig(t, conn)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(cfg.HostQueue("host3"), false, false, false)
			ch.Close()
		}
	})
	r := hostsOf{hosts: map[string][]string{
		uid("i-routed"): {"host2"},
		uid("i-two"):    {"compute", "host3"},
	}, failing: uid("i-fail")}
	recs := map[string]*Recorder{}
	var busesMetrics []func(string) float64
	for _, host := range []string{"compute", "host2", "host3"} {
		recs[host] = &Recorder{}
		b, err := New(cfg, host, recs[host], metrics.New(), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		b.RouteBroadcasts(r)
		runBus(t, b)
		busesMetrics = append(busesMetrics, func(route string) float64 { return testutil.ToFloat64(b.m.BroadcastCounter(route)) })
	}
	ch := confirmModeChannel(t, conn)
	for _, tc := range []struct{ sample, inst string }{
		{"versioned/instance-resize_revert-end.json", "i-routed"},
		{"versioned/instance-evacuate.json", "i-two"},
		{"versioned/instance-delete-end_not_scheduled.json", "i-unknown"},
		{"versioned/instance-resize_revert-end.json", "i-fail"},
	} {
		if err := oslo.Publish(context.Background(), ch, cfg.Nova.Exchange, "versioned_notifications.info",
			sample(t, tc.sample, "m-"+tc.inst, func(d map[string]any) { d["uuid"] = uid(tc.inst) })); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"compute": {"i-two", "i-unknown", "i-fail"},
		"host2":   {"i-routed", "i-unknown", "i-fail"},
		"host3":   {"i-two", "i-unknown", "i-fail"},
	}
	waitFor(t, 20*time.Second, "every host's commands", func() bool {
		for host, insts := range want {
			if len(recs[host].Commands()) < len(insts) {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // nothing more may arrive
	for host, insts := range want {
		got := byInstance(recs[host].Commands())
		if len(got) != len(insts) {
			t.Errorf("%s got commands for %d instances, want %v: %v", host, len(got), insts, got)
		}
		for _, inst := range insts {
			cs := got[uid(inst)]
			if len(cs) != 1 || cs[0].Scope != command.ScopeBroadcast {
				t.Errorf("%s instance %s: got %+v, want one broadcast-scoped command", host, inst, cs)
			}
		}
	}
	sum := func(route string) (n float64) {
		for _, f := range busesMetrics {
			n += f(route)
		}
		return n
	}
	for route, n := range map[string]float64{"routed": 2, "unresolved": 1, "lookup_failed": 1, "off": 0} {
		if got := sum(route); got != n {
			t.Errorf("scour_commands_broadcasts_total{route=%q} = %v, want %v", route, got, n)
		}
	}
}
