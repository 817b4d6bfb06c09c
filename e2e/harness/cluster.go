package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// Cluster is a RabbitMQ cluster of dedicated containers, one node each,
// built from the same image as the single broker. The nodes sit on a
// bridge network of the cluster's own at fixed addresses and know each
// other by name through /etc/hosts entries (the CNI setup here has no DNS
// plugin), so a killed node comes back on the same name and address and
// rejoins. They share one Erlang cookie of the cluster's own, written to
// the rabbitmq user's home before the server starts (not the one the
// package's install left in the image). Clients reach each node at its
// own address on port 5672 (the host routes to the bridge), as they
// would reach separate hosts. Each node keeps its address and MAC across
// a restart: without a fixed MAC, and before that through ports the
// engine forwards to the host, a killed and restarted node was running
// (Erlang ping answered inside) but unreachable from the host in about
// one restart in four, for minutes; with address and MAC fixed, 8 of 8
// restarts in a row came back in 4-6 s.
type Cluster struct {
	Nodes []*Broker // one per node, at the node's address
	names []string  // rabbit@<hostname>
	ips   []netip.Addr

	mu      sync.Mutex
	pubNext int // the node PublishNotification tries first
}

// StartRabbitMQCluster starts an n-node RabbitMQ cluster owned by t
// (removed when t ends) and returns once every node runs and the cluster
// has n members. Quorum queues declared afterwards get a replica on up to
// 3 nodes (RabbitMQ's default quorum_cluster_size), so on every node of a
// 3-node cluster.
func StartRabbitMQCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	skipShort(t)
	if os.Getenv(EnvAMQPURL) != "" {
		t.Skipf("e2e harness: a broker cluster needs container mode; %s points at an external broker", EnvAMQPURL)
	}
	if err := engineEnv(); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	t0 := time.Now()
	ctx := t.Context()
	rabbit, _, err := imageNames()
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	id := UniqueName("rmq")
	netName := id
	ips, removeNet, err := clusterNetwork(ctx, netName, n)
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	var hosts []string
	for i := range n {
		hosts = append(hosts, fmt.Sprintf("%s-n%d", id, i+1))
	}
	var extra []string
	for i, h := range hosts {
		extra = append(extra, h+":"+ips[i].String())
	}
	cl := &Cluster{ips: ips}
	svcs := make([]*service, n)
	for i, h := range hosts {
		cl.names = append(cl.names, "rabbit@"+h)
		addr := net.JoinHostPort(ips[i].String(), "5672")
		svcs[i] = &service{kind: "rabbitmq node " + h, image: rabbit, port: "5672/tcp",
			customize: func(req *testcontainers.ContainerRequest) {
				req.Env = map[string]string{"RABBITMQ_NODENAME": "rabbit@" + h, "SCOUR_ERLANG_COOKIE": hex.EncodeToString(cookie)}
				// The cookie file must be private to rabbitmq before the
				// server (and any rabbitmqctl) reads it. The package's
				// install left a read-only one: replace it.
				req.Cmd = []string{"sh", "-c", `umask 077 && rm -f "$HOME/.erlang.cookie" && printf %s "$SCOUR_ERLANG_COOKIE" >"$HOME/.erlang.cookie" && chmod 400 "$HOME/.erlang.cookie" && exec rabbitmq-server`}
				prev := req.ConfigModifier
				req.ConfigModifier = func(c *container.Config) {
					if prev != nil {
						prev(c)
					}
					c.Hostname = h
				}
				prevHC := req.HostConfigModifier
				req.HostConfigModifier = func(hc *container.HostConfig) {
					prevHC(hc)
					hc.ExtraHosts = extra
				}
				req.Networks = []string{netName}
				req.EndpointSettingsModifier = func(m map[string]*network.EndpointSettings) {
					es := m[netName]
					if es == nil {
						es = &network.EndpointSettings{}
						m[netName] = es
					}
					es.IPAMConfig = &network.EndpointIPAMConfig{IPv4Address: ips[i]}
					// A fixed MAC too: without it a restarted node was
					// at times unreachable from the host for minutes
					// (a neighbour entry for the old MAC, presumably).
					a := ips[i].As4()
					es.MacAddress = network.HardwareAddr{0x02, 0x42, a[0], a[1], a[2], a[3]}
				}
			}}
		s := svcs[i]
		s.ready = func(ctx context.Context, _ int) error { return rabbitReady(ctx, s, addr) }
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startService(ctx, s)
		}()
	}
	wg.Wait()
	// Removed all at once, killed first: a clean stop of each node would
	// wait for its peers' timeouts, for nothing.
	t.Cleanup(func() {
		defer removeNet()
		var wg sync.WaitGroup
		for _, s := range svcs {
			if s.c == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = s.kill(ctx)
				_ = s.terminate(ctx)
			}()
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("e2e harness: starting a %d-node RabbitMQ cluster: %v", n, err)
	}
	for _, s := range svcs {
		cl.Nodes = append(cl.Nodes, &Broker{svc: s, base: "amqp://guest:guest@" + net.JoinHostPort(cl.ips[len(cl.Nodes)].String(), "5672") + "/", vhost: "/"})
	}
	// Join every other node to the first: stop_app, join_cluster,
	// start_app (what an operator does; deterministic, unlike peer
	// discovery racing at boot).
	for i := 1; i < n; i++ {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", cl.names[0]}, {"start_app"}} {
			if _, err := svcs[i].exec(ctx, "rabbitmq", append([]string{"rabbitmqctl"}, args...)...); err != nil {
				t.Fatalf("e2e harness: joining %s to %s: %v", cl.names[i], cl.names[0], err)
			}
		}
	}
	cl.AwaitRunning(t)
	t.Logf("e2e harness: %d-node RabbitMQ cluster %s ready on %s in %s", n, strings.Join(cl.names, ","), cl.URL(), time.Since(t0).Round(time.Millisecond))
	return cl
}

// clusterNetwork creates a bridge network of the cluster's own (the engine
// picks a free subnet) and returns n addresses in it, for the nodes to keep
// across restarts. A network of its own keeps fixed addresses out of the
// default network, whose allocator would hand the next container the
// address after a fixed one (and collide with the next node). remove
// deletes it once the nodes are gone.
func clusterNetwork(ctx context.Context, name string, n int) (ips []netip.Addr, remove func(), err error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, nil, err
	}
	labels := map[string]string{"org.scour.e2e": "rabbitmq-cluster", "org.scour.e2e.pid": strconv.Itoa(os.Getpid())}
	created, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: labels})
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("creating the cluster's network %s: %w", name, err)
	}
	remove = func() {
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cli.NetworkRemove(ctx, created.ID, client.NetworkRemoveOptions{})
	}
	nw, err := cli.NetworkInspect(ctx, created.ID, client.NetworkInspectOptions{})
	if err != nil {
		remove()
		return nil, nil, fmt.Errorf("inspecting the cluster's network %s: %w", name, err)
	}
	for _, c := range nw.Network.IPAM.Config {
		p := c.Subnet.Masked()
		if !p.Addr().Is4() || p.Bits() > 28 {
			continue
		}
		// .10, .11, ...: clear of the gateway (.1).
		a := p.Addr().As4()
		for i := range n {
			a[3] = byte(10 + i)
			ips = append(ips, netip.AddrFrom4(a))
		}
		return ips, remove, nil
	}
	remove()
	return nil, nil, fmt.Errorf("the cluster's network %s has no IPv4 subnet of /28 or larger: %v", name, nw.Network.IPAM.Config)
}

// URL is the cluster's address in Nova's transport_url form, every node
// with guest's credentials: rabbit://guest:guest@10.89.0.10:5672,.../ .
func (c *Cluster) URL() string {
	var hosts []string
	for _, ip := range c.ips {
		hosts = append(hosts, "guest:guest@"+net.JoinHostPort(ip.String(), "5672"))
	}
	return "rabbit://" + strings.Join(hosts, ",") + "/"
}

// NodeName is node i's Erlang name, rabbit@<hostname>.
func (c *Cluster) NodeName(i int) string { return c.names[i] }

// Kill SIGKILLs node i's container: the node vanishes without closing its
// connections or handing over its queues, as a crashed host does.
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	if err := c.KillNode(t.Context(), i); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// KillNode is Kill for a goroutine of its own: it returns the error.
func (c *Cluster) KillNode(ctx context.Context, i int) error {
	if err := c.Nodes[i].svc.kill(ctx); err != nil {
		return fmt.Errorf("%s: %w", c.names[i], err)
	}
	return nil
}

// Start starts killed or stopped node i again and waits until it serves
// AMQP and the whole cluster runs again.
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	if err := c.StartNode(t.Context(), i); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// StartNode is Start for a goroutine of its own: it returns the error.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if err := c.Nodes[i].svc.start(ctx); err != nil {
		return fmt.Errorf("%s: %w", c.names[i], err)
	}
	if _, err := c.Nodes[i].svc.exec(ctx, "rabbitmq", "rabbitmqctl", "await_online_nodes", fmt.Sprint(len(c.Nodes)), "--timeout", "120"); err != nil {
		return fmt.Errorf("%s back, but the cluster is not: %w", c.names[i], err)
	}
	return nil
}

// PauseNode freezes node i: its processes stop, its connections stay
// open and its port still completes TCP handshakes, so clients see a hung
// host and notice only through heartbeats; its peers see it stop
// answering (and, after net_ticktime, 60 s, declare it down: thaw it
// before that, or the cluster stays partitioned). It returns the error,
// for a goroutine of the test's own.
func (c *Cluster) PauseNode(ctx context.Context, i int) error {
	if err := c.Nodes[i].svc.pause(ctx, true); err != nil {
		return fmt.Errorf("%s: %w", c.names[i], err)
	}
	return nil
}

// UnpauseNode thaws node i (AwaitRunning then waits for the cluster).
func (c *Cluster) UnpauseNode(ctx context.Context, i int) error {
	if err := c.Nodes[i].svc.pause(ctx, false); err != nil {
		return fmt.Errorf("%s: %w", c.names[i], err)
	}
	return nil
}

// AwaitRunning waits until every node of the cluster runs, asking a node
// that runs.
func (c *Cluster) AwaitRunning(t testing.TB) {
	t.Helper()
	c.Rabbitmqctl(t, "await_online_nodes", fmt.Sprint(len(c.Nodes)), "--timeout", "120")
}

// Rabbitmqctl runs rabbitmqctl on the first node that answers (a killed
// node's container cannot exec) and returns its output.
func (c *Cluster) Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	var errs []error
	for i, n := range c.Nodes {
		if st, err := n.svc.c.State(t.Context()); err != nil || !st.Running {
			continue
		}
		out, err := n.svc.exec(t.Context(), "rabbitmq", append([]string{"rabbitmqctl"}, args...)...)
		if err == nil {
			return out
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.names[i], err))
	}
	t.Fatalf("e2e harness: rabbitmqctl %s on the cluster: no running node answered: %v", strings.Join(args, " "), errors.Join(errs...))
	return ""
}

// PublishNotification publishes ev as PublishNotification on a Broker does,
// failing over as oslo.messaging's rabbit driver does with a multi-host
// transport_url: a publish that fails or is not confirmed within 5s is
// published again on the next node, until one confirms (at most 2
// minutes). The broker may then hold the notification twice, as it may in
// production: at-least-once delivery. It returns the number of attempts.
func (c *Cluster) PublishNotification(t testing.TB, ev Event, f Format) int {
	t.Helper()
	n, err := c.Publish(t.Context(), ev, f)
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	return n
}

// Publish is PublishNotification for a goroutine of its own: it returns
// the error.
func (c *Cluster) Publish(ctx context.Context, ev Event, f Format) (attempts int, err error) {
	n, err := BuildNotification(ev, f)
	if err != nil {
		return 0, fmt.Errorf("building notification: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var errs []error
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		node := c.pubNext
		c.mu.Unlock()
		err := publishConfirmed(ctx, c.Nodes[node].URL(), n, 5*time.Second)
		if err == nil {
			return attempt, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.names[node], err))
		if time.Now().After(deadline) || ctx.Err() != nil {
			return attempt, fmt.Errorf("no node of the cluster confirmed %s in %d attempts: %w", n.EventType, attempt, errors.Join(errs...))
		}
		c.mu.Lock()
		if c.pubNext == node {
			c.pubNext = (node + 1) % len(c.Nodes)
		}
		c.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

// QueueInfo is one queue as `rabbitmqctl list_queues` reports it.
type QueueInfo struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Leader   string   `json:"leader"`  // quorum queues: the node of the Raft leader
	Members  nodeList `json:"members"` // quorum queues: the nodes holding a replica
	Online   nodeList `json:"online"`  // quorum queues: the members running now
	Messages int      `json:"messages"`
}

// nodeList is a list of node names; rabbitmqctl writes "" for a classic
// queue.
type nodeList []string

func (l *nodeList) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*l = nil
		return nil
	}
	return json.Unmarshal(b, (*[]string)(l))
}

// Queues lists the default vhost's queues.
func (c *Cluster) Queues(t testing.TB) map[string]QueueInfo {
	t.Helper()
	out := c.Rabbitmqctl(t, "list_queues", "name", "type", "leader", "members", "online", "messages", "--formatter", "json", "--quiet")
	var qs []QueueInfo
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("e2e harness: rabbitmqctl list_queues: %v\n%s", err, out)
	}
	m := map[string]QueueInfo{}
	for _, q := range qs {
		m[q.Name] = q
	}
	return m
}

// Connections counts the client connections each node serves now (the
// broker names a connection "client:port -> node address:5672").
func (c *Cluster) Connections(t testing.TB) []int {
	t.Helper()
	out := c.Rabbitmqctl(t, "list_connections", "name", "--formatter", "json", "--quiet")
	var conns []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(out), &conns); err != nil {
		t.Fatalf("e2e harness: rabbitmqctl list_connections: %v\n%s", err, out)
	}
	n := make([]int, len(c.Nodes))
	for _, k := range conns {
		for i, ip := range c.ips {
			if strings.HasSuffix(k.Name, "-> "+ip.String()+":5672") {
				n[i]++
			}
		}
	}
	return n
}

// Memory is each node's erlang:memory(total) in bytes (0 for a node that
// does not run).
func (c *Cluster) Memory(t testing.TB) []int64 {
	t.Helper()
	mem := make([]int64, len(c.Nodes))
	for i, n := range c.Nodes {
		out, err := n.svc.exec(t.Context(), "rabbitmq", "rabbitmqctl", "eval", "erlang:memory(total).")
		if err != nil {
			continue
		}
		mem[i], _ = strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	}
	return mem
}
