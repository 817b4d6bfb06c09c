package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/e2e/harness"
)

// TestBenchFleet is `make bench-fleet`: a fleet against the real broker
// and Placement. A few real scourd processes (simulated hardware) take
// the deletes whose latency is measured; host stand-ins make up the rest
// of the fleet: each declares and consumes a per-host quorum queue bound
// like scourd's (host key + broadcast key), answers every command as a
// scourd without a claim of the instance does (see consume), and scans on a jittered interval with a scourd's scan reads (2 tree
// lists + inventories and allocations per device). The fleet grows in
// steps (SCOUR_BENCH_FLEET_HOSTS, default 100,300,1000); each step runs
// the same storm: deletes on the real hosts (one device loop per host
// broadcast, as a delete nova-api sends without a host; the others
// host-scoped), extra broadcasts
// at a fixed rate, and the scans. It prints Placement requests/s, broker
// memory per host queue and delete-to-returned p50/p99 per step.
//
// The real hosts share one PostgreSQL claims database, so their
// dispatchers route a broadcast to the hosts holding a live claim of the
// instance (bus.broadcast_routing auto) and send it to every host only
// when none does; a stand-in holds no claim, so it drops a broadcast
// without reading Placement, as scourd does. SCOUR_BENCH_FLEET_BASELINE=1
// runs the design before that: per-host sqlite stores (every broadcast to
// every host) and stand-ins that read the instance's allocations on every
// command.
func TestBenchFleet(t *testing.T) {
	if os.Getenv("SCOUR_BENCH_FLEET") == "" {
		t.Skip("benchmark: run with make bench-fleet (sets SCOUR_BENCH_FLEET=1)")
	}
	steps := []int{100, 300, 1000}
	if s := os.Getenv("SCOUR_BENCH_FLEET_HOSTS"); s != "" {
		steps = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("SCOUR_BENCH_FLEET_HOSTS=%q: want a list of host counts", s)
			}
			steps = append(steps, n)
		}
	}
	const (
		realHosts   = 2
		devsPerReal = 4
		scanEvery   = 60 * time.Second // every host's scan interval (compressed from scourd's default)
		broadcastHz = 0.2              // extra broadcasts per second (revert/delete without host)
	)
	phase := 30 * time.Second
	if s := os.Getenv("SCOUR_BENCH_FLEET_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SCOUR_BENCH_FLEET_PHASE=%q: %v", s, err)
		}
		phase = d
	}
	baseline := os.Getenv("SCOUR_BENCH_FLEET_BASELINE") != ""
	began := time.Now()
	c := NewCloud(t)
	opts := []HostOption{WithReconcileInterval(scanEvery)}
	design := "broadcasts routed by the shared PostgreSQL claims database; stand-ins read nothing for a broadcast"
	if baseline {
		design = "BASELINE: sqlite claims (every broadcast to every host); stand-ins read the allocations on every command"
	} else {
		opts = append(opts, WithSharedClaims(sharedClaimsDB(t)))
	}
	var reals []*Host
	for range realHosts {
		var devs []SimDevice
		for i := range devsPerReal {
			devs = append(devs, SimDevice{Address: fmt.Sprintf("0000:%02x:00.0", 0x81+i)})
		}
		reals = append(reals, c.AddHost(t, devs, opts...))
	}
	fleet := &standIns{c: c, t: t, scanEvery: scanEvery, readAll: baseline}
	defer fleet.stop()
	memBase := brokerMemory(t, c)
	fmt.Printf("\nbench-fleet: %d real scourd hosts (%d devices each) + stand-ins; scan interval %s (jittered); %s storm per step; %.1f extra broadcasts/s\n",
		realHosts, devsPerReal, scanEvery, phase, broadcastHz)
	fmt.Printf("design: %s\n", design)
	fmt.Printf("broker memory before stand-ins: %.1f MiB\n", float64(memBase)/(1<<20))
	fmt.Printf("%7s %12s %14s %10s %14s %12s %12s %10s %10s %8s %8s\n", "hosts", "placement/s", "stand-ins/s", "reads/bc", "routed/to-all", "MiB/queue", "broker MiB", "p50", "p99", "deletes", "drain")
	type row struct {
		hosts     int
		rps       float64
		perQueue  float64
		p50, p99  time.Duration
		deletes   int
		broadcast int
	}
	var rows []row
	for _, n := range steps {
		if err := fleet.grow(n - realHosts); err != nil {
			t.Fatalf("growing the fleet to %d hosts: %v", n, err)
		}
		mem := brokerMemory(t, c)
		total0, _ := c.P.Requests()
		own0 := fleet.requests.Load()
		cmd0, bc0, fan0, reads0 := fleet.commands.Load(), fleet.broadcast.Load(), fleet.fanout.Load(), fleet.cmdReads.Load()
		routed0, toAll0 := dispatchedBroadcasts(t, reals)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), phase)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); fleet.broadcasts(ctx, broadcastHz) }()
		lat := deleteStorm(ctx, t, c, reals, &fleet.broadcast, &fleet.fanout, baseline)
		cancel()
		wg.Wait()
		secs := time.Since(start).Seconds()
		total1, _ := c.P.Requests()
		own1 := fleet.requests.Load()
		drain := fleet.drain(cmd0, fleet.fanout.Load()-fan0, 45*time.Second)
		routed1, toAll1 := dispatchedBroadcasts(t, reals)
		perBroadcast := float64(fleet.cmdReads.Load()-reads0) / float64(max(1, fleet.broadcast.Load()-bc0))
		slices.Sort(lat)
		r := row{hosts: n, rps: float64(total1-total0) / secs, deletes: len(lat),
			perQueue: float64(mem-memBase) / float64(max(1, fleet.size())) / (1 << 20)}
		if len(lat) > 0 {
			r.p50, r.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
		}
		rows = append(rows, r)
		fmt.Printf("%7d %12.1f %14.1f %10.1f %14s %12.3f %12.1f %10s %10s %8d %8s\n", n, r.rps, float64(own1-own0)/secs,
			perBroadcast, fmt.Sprintf("%.0f/%.0f", routed1-routed0, toAll1-toAll0), r.perQueue, float64(mem)/(1<<20), r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.deletes, drain.Round(time.Second))
	}
	if len(rows) > 1 {
		a, b := rows[0], rows[len(rows)-1]
		k := float64(b.hosts) / float64(a.hosts)
		fmt.Printf("growth %d -> %d hosts (x%.1f): placement/s x%.2f, p50 x%.2f, p99 x%.2f\n", a.hosts, b.hosts, k,
			b.rps/a.rps, float64(b.p50)/float64(max(1, a.p50)), float64(b.p99)/float64(max(1, a.p99)))
	}
	fmt.Printf("setup and seeding included, the run took %s\n", time.Since(began).Round(time.Second))
	fmt.Printf("stand-in errors: %d (Placement or broker answers that were not 2xx/ack)\n", fleet.errors.Load())
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the end: %s(2-core machine shared with other work: figures are noisy)\n", load)
}

// deleteStorm boots and deletes instances on the real hosts until ctx
// ends (one loop per host sends its deletes without a host, a broadcast;
// the others host-scoped), and returns each
// delete's time to the device back in the pool. It counts the broadcast
// deletes in broadcasts, and in fanout too when they reach every host
// (toAll: not routed).
func deleteStorm(ctx context.Context, t *testing.T, c *Cloud, reals []*Host, broadcasts, fanout *atomic.Int64, toAll bool) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for hi, h := range reals {
		for di, d := range h.Devices {
			wg.Add(1)
			go func(h *Host, addr string, broadcast bool) {
				defer wg.Done()
				for ctx.Err() == nil {
					inst := harness.NewUUID()
					c.Boot(t, h, inst, harness.Versioned, addr)
					time.Sleep(500 * time.Millisecond) // the claim is recorded
					c.P.DeleteAllocations(t, inst)
					start := time.Now()
					ev := harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name}
					if broadcast { // nova-api's delete with no host: every host gets it
						ev.NullHost, ev.PublisherID = true, "nova-api:controller"
					}
					c.Bus.PublishNotification(t, ev, harness.Versioned)
					if broadcast {
						broadcasts.Add(1)
						if toAll {
							fanout.Add(1)
						}
					}
					dev := h.Device(addr)
					for reservedOf(c, dev) != 0 {
						if time.Since(start) > 45*time.Second {
							// Counted as 45 s: the step's p99 shows it.
							fmt.Printf("  device %s on %s not returned 45 s after the delete\n", addr, h.Name)
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
					if reservedOf(c, dev) != 0 {
						mu.Lock()
						lat = append(lat, 45*time.Second)
						mu.Unlock()
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					mu.Unlock()
				}
			}(h, d.Address, di == hi) // one broadcast delete loop per real host
		}
	}
	wg.Wait()
	return lat
}

// dispatchedBroadcasts sums the real hosts' dispatched broadcasts: routed
// to the hosts holding a claim, and sent to every host (any other route).
func dispatchedBroadcasts(t *testing.T, reals []*Host) (routed, toAll float64) {
	for _, h := range reals {
		text := aMetrics(t, h)
		all, _ := aMetric(text, "scour_commands_broadcasts_total")
		r, _ := aMetric(text, "scour_commands_broadcasts_total", `route="routed"`)
		routed, toAll = routed+r, toAll+all-r
	}
	return routed, toAll
}

// reservedOf reads the device's reserved inventory, or -1 when
// Placement did not answer (saturated: the harness's own reads would
// fail the benchmark instead of measuring it).
func reservedOf(c *Cloud, d *harness.DeviceRP) int {
	req, err := http.NewRequest(http.MethodGet, c.P.URL()+"/resource_providers/"+d.UUID+"/inventories", nil)
	if err != nil {
		return -1
	}
	req.Header.Set("X-Auth-Token", c.P.Token())
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	resp, err := c.P.HTTPClient().Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var body struct {
		Inventories map[string]struct {
			Reserved int `json:"reserved"`
		} `json:"inventories"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return -1
	}
	inv, ok := body.Inventories[d.ResourceClass]
	if !ok {
		return -1
	}
	return inv.Reserved
}

var erlangInt = regexp.MustCompile(`\d+`)

// brokerMemory is the broker's total Erlang memory in bytes
// (erlang:memory(total), what rabbitmq-diagnostics memory_breakdown sums).
func brokerMemory(t *testing.T, c *Cloud) int64 {
	t.Helper()
	out := c.Bus.Rabbitmqctl(t, "eval", "erlang:garbage_collect(), erlang:memory(total).")
	n, err := strconv.ParseInt(erlangInt.FindString(out), 10, 64)
	if err != nil {
		t.Fatalf("broker memory: %q: %v", out, err)
	}
	return n
}

// standIns is the lightweight part of the fleet: one compute node with
// one one-time-use device in Placement and one quorum queue per host.
type standIns struct {
	c         *Cloud
	t         *testing.T
	scanEvery time.Duration
	conns     []*amqp.Connection
	hosts     []*standIn
	nodes     []*harness.ComputeNode // seededNodes compute nodes the scans read
	run       string                 // names this run's stand-in hosts
	requests  atomic.Int64           // Placement requests the stand-ins made
	commands  atomic.Int64           // commands the stand-ins consumed
	cmdReads  atomic.Int64           // Placement reads the stand-ins made for commands
	broadcast atomic.Int64           // broadcasts published (extra and broadcast deletes)
	fanout    atomic.Int64           // of those, the ones that reach every host queue
	readAll   bool                   // baseline: read the allocations on every command
	errors    atomic.Int64
	cancel    []context.CancelFunc
	wg        sync.WaitGroup
}

// seededNodes is how many compute nodes the stand-ins' scans read: each
// stand-in scans one of them. Seeding one per stand-in costs 9 writes
// each; at 1,000 hosts that alone would take minutes of the e2e
// Placement's single uwsgi thread. The reads a scan makes are the same
// whichever node it names.
const seededNodes = 50

// seed creates the compute nodes the stand-ins scan (once).
func (f *standIns) seed() error {
	if len(f.nodes) > 0 {
		return nil
	}
	f.run = strings.ReplaceAll(harness.UniqueName("r"), "_", "-")
	var wg sync.WaitGroup
	f.nodes = make([]*harness.ComputeNode, seededNodes)
	for i := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.nodes[i] = f.c.P.SeedComputeNode(f.t, harness.UniqueName("fleet"),
				harness.Device{Address: "0000:81:00.0", VendorID: "144d", ProductID: "a80a", OneTimeUse: true})
		}()
	}
	wg.Wait()
	return nil
}

type standIn struct {
	name string
	node *harness.ComputeNode
}

func (f *standIns) size() int { return len(f.hosts) }

// grow adds stand-ins until there are n: Placement seeding (parallel),
// queue declaration and a consumer plus a scan loop each.
func (f *standIns) grow(n int) error {
	var cfg bus.Config
	cfg.SetDefaults()
	for len(f.hosts) < n {
		batch := min(n-len(f.hosts), 100)
		conn, err := amqp.Dial(f.c.Bus.URL())
		if err != nil {
			return err
		}
		f.conns = append(f.conns, conn)
		if err := f.seed(); err != nil {
			return err
		}
		added := make([]*standIn, batch)
		for i := range added {
			k := len(f.hosts) + i
			added[i] = &standIn{name: fmt.Sprintf("fleet-%s-%04d", f.run, k), node: f.nodes[k%len(f.nodes)]}
		}
		for _, h := range added {
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			if err := f.declare(ch, &cfg, h.name); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			f.cancel = append(f.cancel, cancel)
			deliveries, err := ch.Consume(cfg.HostQueue(h.name), "", false, false, false, false, nil)
			if err != nil {
				return err
			}
			f.wg.Add(2)
			go f.consume(ctx, h, deliveries)
			go f.scanLoop(ctx, h)
			f.hosts = append(f.hosts, h)
		}
	}
	return nil
}

// declare makes the host's queue as scourd's bus does: a durable quorum
// queue with the delivery limit and dead-letter exchange, bound to its
// host key and the broadcast key on scour's command exchange.
func (f *standIns) declare(ch *amqp.Channel, cfg *bus.Config, host string) error {
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return err
	}
	q := cfg.HostQueue(host)
	_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		"x-delivery-limit": int64(cfg.DeliveryLimit), "x-dead-letter-exchange": cfg.UnroutableExchange()})
	if err != nil {
		return fmt.Errorf("declaring %s: %w", q, err)
	}
	for _, key := range []string{bus.HostKey(host), cfg.BroadcastKey} {
		if err := ch.QueueBind(q, key, cfg.Exchange, false, nil); err != nil {
			return fmt.Errorf("binding %s: %w", q, err)
		}
	}
	return nil
}

// consume answers each command as a scourd does: a stand-in holds no
// claim, so a broadcast costs it no Placement read; in the baseline
// (readAll) every command costs one read of the instance's allocations,
// as it did before scourd dropped unclaimed broadcasts. Then the ack.
func (f *standIns) consume(ctx context.Context, h *standIn, deliveries <-chan amqp.Delivery) {
	defer f.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			if c, err := command.Unmarshal(d.Body); err == nil {
				if f.readAll || c.Scope != command.ScopeBroadcast {
					f.cmdReads.Add(1)
					f.get(ctx, "/allocations/"+c.InstanceUUID)
				}
			} else {
				f.errors.Add(1)
			}
			f.commands.Add(1)
			if err := d.Ack(false); err != nil {
				f.errors.Add(1)
			}
		}
	}
}

// scanLoop scans like scourd's reconciler: a random first offset (jitter)
// then every scanEvery.
func (f *standIns) scanLoop(ctx context.Context, h *standIn) {
	defer f.wg.Done()
	next := time.Duration(rand.Int64N(int64(f.scanEvery)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		next = f.scanEvery
		f.get(ctx, "/resource_providers?in_tree="+h.node.UUID+"&required=HW_PCI_ONE_TIME_USE")
		f.get(ctx, "/resource_providers?in_tree="+h.node.UUID+"&required=HW_PCI_ONE_TIME_USE,CUSTOM_SCOUR_QUARANTINED")
		for _, d := range h.node.Devices {
			f.get(ctx, "/resource_providers/"+d.UUID+"/inventories")
			f.get(ctx, "/resource_providers/"+d.UUID+"/allocations")
		}
	}
}

// broadcasts publishes a delete without host (a broadcast to every host
// queue) for an instance nobody holds, hz times a second, through the
// real dispatch (a scourd's notification consumer).
func (f *standIns) broadcasts(ctx context.Context, hz float64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / hz))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f.c.Bus.PublishNotification(f.t, harness.Event{Type: "instance.delete.end", InstanceUUID: harness.NewUUID(), NullHost: true, PublisherID: "nova-api:controller"}, harness.Versioned)
			f.broadcast.Add(1)
			f.fanout.Add(1) // nobody holds the instance: every host
		}
	}
}

func (f *standIns) get(ctx context.Context, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.c.P.URL()+path, nil)
	if err != nil {
		f.errors.Add(1)
		return
	}
	req.Header.Set("X-Auth-Token", f.c.P.Token())
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	req.Header.Set("Accept", "application/json")
	f.requests.Add(1)
	resp, err := f.c.P.HTTPClient().Do(req)
	if err != nil {
		if ctx.Err() == nil {
			f.errors.Add(1)
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound {
		f.errors.Add(1)
	}
}

// drain waits until every stand-in has consumed every broadcast of the
// step that went to every host (want per stand-in), at most max,
// and returns how long that took after the storm: the fleet's backlog.
func (f *standIns) drain(from int64, want int64, max time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < max && f.commands.Load()-from < want*int64(f.size()) {
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

func (f *standIns) stop() {
	for _, c := range f.cancel {
		c()
	}
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.wg.Wait()
}
