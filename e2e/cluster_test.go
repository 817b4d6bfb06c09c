package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// WithBusURL points the host's scourd at url (bus.url), e.g. a cluster's
// multi-host transport_url.
func WithBusURL(url string) HostOption {
	return func(cfg map[string]any) { cfg["bus"].(map[string]any)["url"] = url }
}

// A three-node RabbitMQ cluster loses a node mid-stream (SIGKILL), twice:
// first the node the scourds are connected to (it also leads scour's
// queues, which the scourds declared there), then, once it is back, the
// node the scourds failed over to. Then, once that one is back too, the
// node the scourds use freezes for 20 s (a hung host: no reset, only
// missed heartbeats tell) while the last deletes are published.
// Nova's deletes keep being published with publisher confirms, failing
// over between nodes as oslo.messaging does with a multi-host
// transport_url; the scourds get the same multi-host URL. Every device is
// cleaned exactly once: every delete reached scour (none lost), each
// device has one cleaning run and one record, and was returned to the
// pool once (none cleaned twice, although a kill may cause redeliveries
// and republished notifications). The second kill can only be survived
// if the node that came back rejoined its queues' quorum.
func TestBrokerClusterNodeLossLosesNothing(t *testing.T) {
	t.Parallel()
	cl := harness.StartRabbitMQCluster(t, 3)
	// Boots (all before the kills) publish on one node.
	c := &Cloud{Bus: cl.Nodes[2], P: harness.StartPlacement(t)}
	const hosts, perHost = 2, 12
	type release struct {
		h          *Host
		addr, inst string
	}
	var rels []release
	var hs []*Host
	for range hosts {
		var devs []SimDevice
		for i := range perHost {
			devs = append(devs, SimDevice{Address: fmt.Sprintf("0000:%02x:00.0", 0x81+i)})
		}
		// Only notifications drive these hosts: no periodic scan could
		// make up for a lost delete.
		// Heartbeats every 2 s: a frozen node is noticed after ~6 s.
		h := c.AddHost(t, devs, WithReconcileInterval(time.Hour), WithBusURL(cl.URL()), func(cfg map[string]any) {
			cfg["bus"].(map[string]any)["heartbeat"] = "2s"
		})
		hs = append(hs, h)
		for _, d := range devs {
			rels = append(rels, release{h: h, addr: d.Address, inst: harness.NewUUID()})
		}
	}
	for _, r := range rels {
		c.Boot(t, r.h, r.inst, harness.Versioned, r.addr)
	}
	for _, r := range rels {
		waitClaim(t, r.h, r.inst)
	}
	qs := cl.Queues(t)
	notif := qs["scour.notifications"]
	if notif.Type != "quorum" || len(notif.Members) != 3 {
		t.Fatalf("scour.notifications = %+v, want a quorum queue with a replica on each of the 3 nodes", notif)
	}
	for _, h := range hs {
		if q := qs["scour.host."+h.Name]; q.Type != "quorum" || len(q.Members) != 3 {
			t.Fatalf("host queue of %s = %+v, want a quorum queue with 3 replicas", h.Name, q)
		}
	}
	first := busiest(cl.Connections(t), -1)
	t.Logf("before: scour.notifications led by %s; client connections per node %v", notif.Leader, cl.Connections(t))

	// The stream: a delete every 20ms (plus its publish), published here;
	// the kills and restarts run beside it, so a kill can land on a
	// publish, a delivery or an ack in flight. A node is killed at gate1 and started again
	// while the stream goes on; the second node is killed at gate2, once
	// the first is back, and started again at the end.
	gate1, gate2, gate3 := len(rels)/4, len(rels)/2, 3*len(rels)/4
	type chaos struct {
		node int
		done chan error // the kill's outcome, then the restart's
	}
	kills := make(chan chaos)
	go func() {
		for k := range kills {
			err := cl.KillNode(t.Context(), k.node)
			k.done <- err
			if err == nil {
				err = cl.StartNode(t.Context(), k.node)
			}
			k.done <- err
		}
	}()
	defer close(kills)
	wait := func(k chaos, since time.Time) {
		t.Helper()
		for range 2 {
			if err := <-k.done; err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s back in the cluster %s after its kill", cl.NodeName(k.node), time.Since(since).Round(time.Millisecond))
	}
	// Thawed before net_ticktime (60 s): longer, the other nodes declare
	// it down and, with RabbitMQ's default partition handling (ignore),
	// the cluster stays split after the thaw.
	const freeze = 20 * time.Second
	thawed := make(chan error, 1)
	var t0, t1, t2 time.Time
	var k1, k2 chaos
	second, third, attempts := -1, -1, 0
	for i, r := range rels {
		switch i {
		case gate1:
			t0 = time.Now()
			k1 = chaos{node: first, done: make(chan error, 2)}
			kills <- k1
			t.Logf("killing %s (the scourds' node) after %d deletes", cl.NodeName(first), i)
		case gate2:
			wait(k1, t0)
			// The node the scourds failed over to.
			conns := cl.Connections(t)
			second = busiest(conns, first)
			q := cl.Queues(t)["scour.notifications"]
			t.Logf("killing %s after %d deletes (scour.notifications led by %s, online %v; client connections per node %v): the quorum is then %s, which came back, and one other node",
				cl.NodeName(second), i, q.Leader, q.Online, conns, cl.NodeName(first))
			t1 = time.Now()
			k2 = chaos{node: second, done: make(chan error, 2)}
			kills <- k2
		case gate3:
			wait(k2, t1)
			conns := cl.Connections(t)
			third = busiest(conns, -1)
			t.Logf("freezing %s (the scourds' node, client connections per node %v) for %s after %d deletes", cl.NodeName(third), conns, freeze, i)
			t2 = time.Now()
			if err := cl.PauseNode(t.Context(), third); err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(freeze)
				thawed <- cl.UnpauseNode(t.Context(), third)
			}()
		}
		c.P.DeleteAllocations(t, r.inst)
		attempts += cl.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: r.inst, Host: r.h.Name, Node: r.h.Name}, harness.Versioned)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("last delete published %s after the freeze began", time.Since(t2).Round(time.Millisecond))
	if err := <-thawed; err != nil {
		t.Fatal(err)
	}
	cl.AwaitRunning(t)
	t.Logf("%s thawed and the cluster whole again %s after the freeze began", cl.NodeName(third), time.Since(t2).Round(time.Millisecond))
	// A frozen node resets nothing: each scourd noticed through missed
	// heartbeats and failed over while it was frozen.
	for _, h := range hs {
		var lost []string
		for _, l := range strings.Split(h.Logs(), "\n") {
			if strings.Contains(l, `msg="broker connection lost; reconnecting"`) {
				lost = append(lost, l)
			}
		}
		if len(lost) == 3 {
			if at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(lost[2])[0], "time=")); err == nil {
				t.Logf("scourd %s noticed the freeze %s after it began", h.Name, at.Sub(t2).Round(time.Millisecond))
			}
		}
	}

	for _, r := range rels {
		c.WaitAvailable(t, r.h, r.addr, 3*time.Minute)
	}
	t.Logf("all %d devices returned %s after the first kill; %d deletes published in %d attempts (a retried publish may be held twice by the broker)",
		len(rels), time.Since(t0).Round(time.Millisecond), len(rels), attempts)

	logs := ""
	for _, h := range hs {
		logs += h.Logs()
	}
	dispatched := 0
	for _, r := range rels {
		// Not lost: some scourd dispatched this instance's delete.
		n := countLines(logs, `msg="notification dispatched"`, "event=instance.delete.end", r.inst)
		if n == 0 {
			t.Errorf("the delete of %s (device %s on %s) never reached a scourd: lost", r.inst, r.addr, r.h.Name)
		}
		dispatched += n
		// Cleaned once: one run (any state), one record, one return.
		if runs := runsOf(t, r.h, r.addr); len(runs) != 1 {
			t.Errorf("%s on %s: %d cleaning runs, want 1: %v", r.addr, r.h.Name, len(runs), runs)
		}
		recs := r.h.Records(t, r.addr)
		if len(recs) != 1 {
			t.Errorf("%s on %s: %d cleaning records, want 1", r.addr, r.h.Name, len(recs))
		} else if prev, _ := recs[0]["previous_tenant"].(map[string]any); prev["instance_uuid"] != r.inst {
			t.Errorf("%s on %s: record names previous tenant %v, want instance %s", r.addr, r.h.Name, recs[0]["previous_tenant"], r.inst)
		}
		if n := countLines(r.h.Logs(), `msg="device cleaned and returned to the pool"`, "address="+r.addr); n != 1 {
			t.Errorf("%s on %s returned to the pool %d times, want 1", r.addr, r.h.Name, n)
		}
		if !r.h.MediaZeroed(t, r.addr) {
			t.Errorf("%s on %s returned but not wiped", r.addr, r.h.Name)
		}
	}
	// Nothing left behind in scour's queues (every message acked).
	Eventually(t, 30*time.Second, "scour's queues drained", func() (bool, string) {
		var left []string
		for name, q := range cl.Queues(t) {
			if strings.HasPrefix(name, "scour.") && q.Messages != 0 {
				left = append(left, fmt.Sprintf("%s: %d", name, q.Messages))
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	redelivered := 0
	for _, h := range hs {
		redelivered += countLines(h.Logs(), `msg="duplicate command acked without handling"`)
		// Both kills and the freeze hit this scourd's connection.
		if n := countLines(h.Logs(), `msg="broker connection lost; reconnecting"`); n != 3 {
			t.Errorf("scourd %s lost its broker connection %d times, want 3 (two kills, one freeze)", h.Name, n)
		}
		for _, l := range strings.Split(h.Logs(), "\n") {
			if containsAll(l, "level=WARN") || strings.Contains(l, `msg="reconnected to the broker"`) {
				t.Logf("scourd %s: %s", h.Name, l)
			}
		}
	}
	var mib []string
	for _, m := range cl.Memory(t) {
		mib = append(mib, fmt.Sprintf("%.0f", float64(m)/(1<<20)))
	}
	t.Logf("broker nodes' memory (MiB): %s", strings.Join(mib, ", "))
	t.Logf("%d deletes dispatched for %d published (a redelivered or republished notification is dispatched again); duplicate commands acked without handling: %d",
		dispatched, len(rels), redelivered)
}

// busiest is the node with the most client connections, other than skip.
func busiest(conns []int, skip int) int {
	best := -1
	for n, k := range conns {
		if n != skip && (best < 0 || k > conns[best]) {
			best = n
		}
	}
	return best
}

// runsOf lists every cleaning run of addr on h, whatever its state.
func runsOf(t *testing.T, h *Host, addr string) []map[string]any {
	t.Helper()
	out, err := exec.Command(filepath.Join(bins, "scourctl"), "records", "list", "--state-path", filepath.Join(h.Dir, "state"),
		"--device", addr, "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("scourctl records list %s: %v\n%s", addr, err, out)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("scourctl records list %s: not JSON: %v\n%s", addr, err, out)
	}
	return rows
}
