package placement

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// claimHost is a host "cn_1" (node-1) whose one-time-use devices the
// instance "inst-1" may hold. Every device has one inventory of total 1;
// a write moves its generation, as Placement's does. It answers the
// claim's reads (GET /allocations/inst-1 with each provider's generation,
// the tree listings with their trait filters) and a device's reads and
// PUT.
type claimHost struct {
	mu   sync.Mutex
	devs map[string]*claimDev
	puts int
	reqs int
	// served, when set, runs as each request is answered (under mu).
	served func(r *http.Request)
}

type claimDev struct {
	name        string
	gen         int
	reserved    int
	quarantined bool
	held        bool // by inst-1
}

func newClaimHost(n int) *claimHost {
	h := &claimHost{devs: map[string]*claimDev{}}
	for i := range n {
		h.devs[fmt.Sprintf("d%d", i)] = &claimDev{name: fmt.Sprintf("cn_1_0000:%02x:00.0", 0x81+i), gen: 5, reserved: 1, held: true}
	}
	return h
}

func (h *claimHost) dev(uuid string) *claimDev {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.devs[uuid]
}

// release deletes inst-1's allocations: no generation moves.
func (h *claimHost) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.devs {
		d.held = false
	}
}

func (h *claimHost) handle(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := r.URL.Query()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/resource_providers/"), "/")
	switch {
	case q.Get("name") != "":
		fmt.Fprint(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
		return
	}
	h.reqs++
	if h.served != nil {
		h.served(r)
	}
	switch {
	case r.URL.Path == "/allocations/inst-1":
		allocs := []string{`"node-1": {"generation": 40, "resources": {"VCPU": 2}}`}
		for u, d := range h.devs {
			if d.held {
				allocs = append(allocs, fmt.Sprintf(`%q: {"generation": %d, "resources": {"CUSTOM_PCI_144D_A80A": 1}}`, u, d.gen))
			}
		}
		fmt.Fprintf(w, `{"allocations": {%s}, "project_id": "p", "user_id": "u"}`, strings.Join(allocs, ","))
	case r.URL.Path == "/resource_providers":
		req := q.Get("required")
		var out []string
		for u, d := range h.devs {
			switch {
			case strings.Contains(req, "!"+DefaultQuarantineTrait) && d.quarantined:
				continue
			case strings.Contains(req, ","+DefaultQuarantineTrait) && !d.quarantined:
				continue
			}
			out = append(out, fmt.Sprintf(`{"uuid": %q, "name": %q, "generation": %d}`, u, d.name, d.gen))
		}
		sort.Strings(out)
		fmt.Fprintf(w, `{"resource_providers": [%s]}`, strings.Join(out, ","))
	case len(parts) >= 2 && h.devs[parts[0]] != nil:
		d := h.devs[parts[0]]
		switch {
		case r.Method == http.MethodPut && parts[1] == "inventories":
			h.puts++
			d.gen++
			d.reserved = 0
			fmt.Fprintf(w, `{"resource_provider_generation": %d}`, d.gen)
		case parts[1] == "inventories":
			fmt.Fprintf(w, `{"resource_provider_generation": %d, "inventories": {"CUSTOM_PCI_144D_A80A":
 {"total": 1, "reserved": %d, "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0}}}`, d.gen, d.reserved)
		case parts[1] == "allocations":
			a := ""
			if d.held {
				a = `"inst-1": {"resources": {"CUSTOM_PCI_144D_A80A": 1}}`
			}
			fmt.Fprintf(w, `{"resource_provider_generation": %d, "allocations": {%s}}`, d.gen, a)
		case parts[1] == "traits":
			traits := `"HW_PCI_ONE_TIME_USE"`
			if d.quarantined {
				traits += `, "CUSTOM_SCOUR_QUARANTINED"`
			}
			fmt.Fprintf(w, `{"resource_provider_generation": %d, "traits": [%s]}`, d.gen, traits)
		default:
			http.NotFound(w, r)
		}
	default:
		http.NotFound(w, r)
	}
}

// fakeClock is the client's clock in these tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// testWindow is the reuse window these tests set (the default's value,
// set explicitly so a change of the default shows in the test of it).
const testWindow = time.Second

// newClaimGate returns a gate over h with the given reuse window (nil:
// testWindow) and a fake clock.
func newClaimGate(t *testing.T, h *claimHost, window *time.Duration) (*Gate, *fakeClock) {
	t.Helper()
	f := &fakePlacement{handle: h.handle}
	cfg := unitConfig(startFake(t, f).URL)
	if window == nil {
		w := testWindow
		window = &w
	}
	cfg.CheckReuseWindow = window
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)}
	c.now = clk.now
	return NewGate(c, nil), clk
}

// requests counts the requests h answered but the compute node lookup
// (once per client).
func (h *claimHost) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reqs
}

// checkAsOf is the pipeline's check before a destructive step: the dated
// one, which alone may reuse the release's read.
func checkAsOf(ctx context.Context, g *Gate, rp string) (bool, error) {
	in, _, err := g.HasAllocationsAsOf(ctx, rp)
	return in, err
}

func checks(g *Gate, how string) float64 {
	return testutil.ToFloat64(g.c.metrics.checks.WithLabelValues(how))
}

// claim claims inst-1 as the handlers do at create.end and logs how many
// requests it made.
func claim(t *testing.T, g *Gate, h *claimHost, want int) *InstanceClaim {
	t.Helper()
	before := h.requests()
	ic, err := g.InstanceDevices(context.Background(), "inst-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ic.Devices) != want {
		t.Fatalf("claim matched %d devices %+v, want %d", len(ic.Devices), ic.Devices, want)
	}
	t.Logf("claim of %d devices: %d requests", want, h.requests()-before)
	return ic
}

// claimedOne is a host with one device d0 that inst-1 holds, claimed
// with the default window.
func claimedOne(t *testing.T) (*claimHost, *Gate, Ref) {
	t.Helper()
	h := newClaimHost(1)
	g, _ := newClaimGate(t, h, nil)
	claim(t, g, h, 1)
	return h, g, Ref{UUID: "d0", Name: h.dev("d0").name}
}

// releasedAndRead is claimedOne after inst-1's delete and the release's
// read of d0.
func releasedAndRead(t *testing.T) (*claimHost, *Gate) {
	t.Helper()
	h, g, ref := claimedOne(t)
	h.release()
	if _, err := g.ReadDevice(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	return h, g
}

// The release of a device claimed at create.end: the claim's listing
// (quarantine trait forbidden) proved its traits at the generation its
// allocations read gave, so the release's read (1 request: the
// inventory is the claim's, at the same generation) is complete, the
// check before the first destructive step answers from it once, and the
// un-reserve is one PUT: 2 requests a device. A second check asks
// Placement (one-shot), and so does every check on a fresh gate with
// window 0.
func TestReleaseReusesCompleteReadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newClaimHost(8)
	g, _ := newClaimGate(t, h, nil)
	before := h.requests()
	claim(t, g, h, 8)
	if n := h.requests() - before; n != 2+8 {
		t.Errorf("claim of 8 devices: %d requests, want 2 + 8 (allocations, one listing, an inventory each)", n)
	}
	h.release()
	before = h.requests()
	for i := range 8 {
		ref := Ref{UUID: fmt.Sprintf("d%d", i), Name: h.dev(fmt.Sprintf("d%d", i)).name}
		d, err := g.ReadDevice(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if !d.traitsRead || d.Quarantined || !d.Dirty() {
			t.Fatalf("release read of %s: traits known %v, quarantined %v, dirty %v; want a complete dirty read", ref.UUID, d.traitsRead, d.Quarantined, d.Dirty())
		}
		if in, err := checkAsOf(ctx, g, ref.UUID); in || err != nil {
			t.Fatalf("check of %s = %v, %v; want dirty", ref.UUID, in, err)
		}
		if err := g.Unreserve(ctx, ref, "run-"+ref.UUID); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.requests() - before; n != 2*8 || h.puts != 8 {
		t.Errorf("release of 8 devices: %d requests, %d PUTs; want 2 a device (read, PUT)", n, h.puts)
	}
	if got := checks(g, "reused"); got != 8 {
		t.Errorf("checks reused = %v, want 8", got)
	}
}

// The reuse is one-shot: the check before a retry (or after a host-slot
// wait, or before a later step) asks Placement.
func TestCheckReusesReadOnlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, g := releasedAndRead(t)
	before := h.requests()
	if in, err := checkAsOf(ctx, g, "d0"); in || err != nil || h.requests() != before {
		t.Fatalf("first check = %v, %v with %d requests; want dirty from the read, none", in, err, h.requests()-before)
	}
	// Someone allocates the device meanwhile (after lifting its fence:
	// the generation moves).
	dev := h.dev("d0")
	h.mu.Lock()
	dev.held, dev.gen = true, dev.gen+2
	h.mu.Unlock()
	if in, err := checkAsOf(ctx, g, "d0"); !in || err != nil || h.requests() == before {
		t.Errorf("second check = %v, %v with %d requests; want Placement asked and the allocation seen", in, err, h.requests()-before)
	}
	if checks(g, "reused") != 1 {
		t.Errorf("checks reused = %v, want 1", checks(g, "reused"))
	}
}

// The reuse happens only while the read is at most the window old, and
// never with window 0, for a read whose traits are unknown, or for a
// read that does not show the device dirty.
func TestCheckReuseOnlyFreshCompleteDirtyReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zero, defaultWindow := time.Duration(0), time.Duration(DefaultCheckReuseWindow)
	for _, tc := range []struct {
		name   string
		window *time.Duration
		// before the release's read (after the claim)
		mod     func(h *claimHost)
		wait    time.Duration
		reuse   bool
		inUse   bool
		noClaim bool
	}{
		{name: "1s window, at once", reuse: true},
		{name: "at the window's end", wait: testWindow, reuse: true},
		{name: "past the window", wait: testWindow + time.Nanosecond},
		{name: "window 0", window: &zero},
		{name: "the default window", window: &defaultWindow, reuse: true},
		{name: "past the default window", window: &defaultWindow, wait: DefaultCheckReuseWindow + time.Nanosecond},
		{name: "no claim: traits unknown", noClaim: true},
		{name: "still allocated", mod: func(h *claimHost) { h.devs["d0"].held = true }, inUse: true},
		{name: "generation moved since the claim (traits unknown)", mod: func(h *claimHost) { h.devs["d0"].gen++ }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newClaimHost(1)
			g, clk := newClaimGate(t, h, tc.window)
			if !tc.noClaim {
				claim(t, g, h, 1)
			}
			h.release()
			if tc.mod != nil {
				h.mu.Lock()
				tc.mod(h)
				h.mu.Unlock()
			}
			d, err := g.ReadDevice(ctx, Ref{UUID: "d0", Name: h.dev("d0").name})
			if err != nil {
				t.Fatal(err)
			}
			clk.advance(tc.wait)
			before := h.requests()
			in, err := checkAsOf(ctx, g, "d0")
			if err != nil || in != tc.inUse {
				t.Fatalf("check = %v, %v; want in use %v", in, err, tc.inUse)
			}
			asked := h.requests() > before
			if asked == tc.reuse || (checks(g, "reused") == 1) != tc.reuse {
				t.Errorf("check asked Placement %v (reused %v; read complete %v, dirty %v); want reuse %v",
					asked, checks(g, "reused"), d.traitsRead, d.Dirty(), tc.reuse)
			}
		})
	}
}

// Traits come from the claim only at the generation the claim proved
// them at: after scour's own write (the un-reserve) or any other write the
// read does not know them.
func TestClaimTraitsOnlyAtTheirGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, g, ref := claimedOne(t)
	if _, ok := g.c.traitsAt.at("d0", h.dev("d0").gen); !ok {
		t.Fatal("claim did not remember d0's traits at its generation")
	}
	h.release()
	if err := g.Unreserve(ctx, ref, ""); err != nil { // scour's own write
		t.Fatal(err)
	}
	if _, ok := g.c.traitsAt.at("d0", 5); ok {
		t.Error("traits still remembered after scour's own inventory write")
	}
	d, err := g.ReadDevice(ctx, ref)
	if err != nil || d.traitsRead {
		t.Errorf("read after a write: %v, traits known %v; want them unknown", err, d.traitsRead)
	}
}

// A one-time-use device of this host that carries the quarantine trait and
// that the instance holds is missing from the claim's filtered listing: the
// claim lists again with the one-time-use trait alone and matches it as
// before (it is burned and claimed all the same), one request more. Its
// traits are not remembered, and its release read is not complete.
func TestClaimMatchesQuarantinedAllocatedDevice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newClaimHost(2)
	h.devs["d1"].quarantined = true
	g, _ := newClaimGate(t, h, nil)
	before := h.requests()
	ic := claim(t, g, h, 2)
	if n := h.requests() - before; n != 3+2 {
		t.Errorf("claim with a quarantined device: %d requests, want 3 + 2 (allocations, two listings, an inventory each)", n)
	}
	if ic.Devices[1].UUID != "d1" || ic.Devices[1].Used != 1 {
		t.Errorf("claim devices %+v, want d1 held", ic.Devices)
	}
	if _, ok := g.c.traitsAt.at("d1", h.dev("d1").gen); ok {
		t.Error("quarantined device's traits remembered as eligible")
	}
	if _, ok := g.c.traitsAt.at("d0", h.dev("d0").gen); !ok {
		t.Error("eligible device's traits not remembered")
	}
	h.release()
	d, err := g.ReadDevice(ctx, Ref{UUID: "d1", Name: h.dev("d1").name})
	if err != nil || d.traitsRead {
		t.Fatalf("release read of the quarantined device: %v, traits known %v", err, d.traitsRead)
	}
	if in, err := checkAsOf(ctx, g, "d1"); !in || err != nil {
		t.Errorf("check of the quarantined device = %v, %v; want refused", in, err)
	}
	if checks(g, "reused") != 0 {
		t.Error("the quarantined device's check reused a read")
	}
}

// A check answered from the release's read is dated by that read
// (HasAllocationsAsOf): the pipeline measures from it how old the answer
// is when the destructive step starts, and asks again past a second. A
// check that asks Placement is dated when it asked.
func TestReusedAnswerIsAsOldAsItsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newClaimHost(1)
	g, clk := newClaimGate(t, h, nil)
	claim(t, g, h, 1)
	h.release()
	readAt := clk.now()
	h.mu.Lock()
	h.served = func(*http.Request) { clk.advance(200 * time.Millisecond) } // the read takes its time
	h.mu.Unlock()
	if _, err := g.ReadDevice(ctx, Ref{UUID: "d0", Name: h.dev("d0").name}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.served = nil
	h.mu.Unlock()
	clk.advance(100 * time.Millisecond)
	in, asOf, err := g.HasAllocationsAsOf(ctx, "d0")
	if in || err != nil || checks(g, "reused") != 1 {
		t.Fatalf("first check = %v, %v (reused %v); want dirty, from the read", in, err, checks(g, "reused"))
	}
	if !asOf.Equal(readAt) {
		t.Errorf("reused answer dated %s after the read's start, want the read's start (not its end)", asOf.Sub(readAt))
	}
	clk.advance(300 * time.Millisecond)
	askedAt := clk.now()
	if _, asOf, err = g.HasAllocationsAsOf(ctx, "d0"); err != nil || !asOf.Equal(askedAt) {
		t.Errorf("second check dated %v (%v), want when it asked Placement", asOf.Sub(readAt), err)
	}
}

// HasAllocations, whose caller is not told how old its answer is (the
// look at an NVMe's capabilities on nvme before a run binds it), never
// reuses the release's read: it asks Placement.
func TestUndatedCheckNeverReuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, g := releasedAndRead(t)
	before := h.requests()
	if in, err := g.HasAllocations(ctx, "d0"); in || err != nil || h.requests() == before || checks(g, "reused") != 0 {
		t.Fatalf("undated check = %v, %v with %d requests (reused %v); want dirty, asked of Placement", in, err, h.requests()-before, checks(g, "reused"))
	}
}
