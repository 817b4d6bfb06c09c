package placement

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// claimedInstance seeds n devices Nova allocated to one instance (with
// the compute node's resources) and burned, and a gate whose client knows
// the compute node already (looked up once per client, not per claim).
func claimedInstance(t *testing.T, n int) (*seedHost, []Ref, *Gate, string) {
	t.Helper()
	env := testPlacement(t)
	h := seedNode(t, env)
	inst := newUUID()
	var devs []Ref
	res := map[string]map[string]int{h.NodeUUID: {"VCPU": 2, "MEMORY_MB": 1024}}
	for i := range n {
		d := h.seedDevice(devSpec{Addr: fmt.Sprintf("0000:%02x:00.0", 0x81+i)})
		devs = append(devs, d)
		res[d.UUID] = map[string]int{"CUSTOM_PCI_144D_A80A": 1}
	}
	h.allocate(inst, res)
	for _, d := range devs {
		h.setReserved(d, "CUSTOM_PCI_144D_A80A", 1) // Nova burns it
	}
	// The reuse is on by default (1s); these tests set it explicitly.
	c := newE2EClient(t, env, h.Node, func(cfg *Config) { w := time.Second; cfg.CheckReuseWindow = &w })
	if _, err := c.nodeRP(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h, devs, NewGate(c, nil), inst
}

// claimInstance claims inst as the handlers do at create.end and checks
// that it found every device burned.
func claimInstance(t *testing.T, g *Gate, inst string, devs []Ref) uint64 {
	t.Helper()
	start := g.c.Calls()
	ic, err := g.InstanceDevices(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(ic.Devices) != len(devs) {
		t.Fatalf("claim matched %d devices, want %d", len(ic.Devices), len(devs))
	}
	for _, d := range ic.Devices {
		if !d.Fenced() || d.Used != 1 {
			t.Fatalf("claimed %s: fenced %v used %d, want burned and held", d.Name, d.Fenced(), d.Used)
		}
	}
	return g.c.Calls() - start
}

// The release of an 8-device instance against the real Placement: the
// claim costs 2 + 8 (the instance's allocations, which carry each
// provider's generation, one listing with the quarantine trait forbidden,
// an inventory read each), and once Nova deleted the instance each device
// returns to the pool with exactly 2 calls: the release's read (its
// allocations; inventory and traits known from the claim at the same
// generation), the check before the first destructive step answered from
// that read, and the guarded PUT.
func TestE2EClaimedDevicesReturnInTwoCallsEach(t *testing.T) {
	h, devs, g, inst := claimedInstance(t, 8)
	ctx := context.Background()
	if n := claimInstance(t, g, inst, devs); n != 2+8 {
		t.Errorf("claim of 8 devices made %d calls, want 2 + 8", n)
	}
	h.must("DELETE", "/allocations/"+inst, nil, nil, 204) // Nova deletes the instance
	start := g.c.Calls()
	for _, dev := range devs {
		d, err := g.ReadDevice(ctx, dev)
		if err != nil || !d.traitsRead || !d.Dirty() {
			t.Fatalf("release read of %s: %v, traits known %v, state %s; want a complete dirty read", dev.Name, err, d.traitsRead, d.State)
		}
		if in, err := checkAsOf(ctx, g, dev.UUID); in || err != nil {
			t.Fatalf("check of %s = %v, %v; want dirty", dev.Name, in, err)
		}
		if err := g.Unreserve(ctx, dev, ""); err != nil {
			t.Fatal(err)
		}
	}
	calls := g.c.Calls() - start
	t.Logf("Placement calls for %d released devices: %d", len(devs), calls)
	if calls != uint64(2*len(devs)) {
		t.Errorf("release made %d calls, want exactly %d (per device: read, PUT)", calls, 2*len(devs))
	}
	for _, dev := range devs {
		if h.reserved(dev) != 0 {
			t.Errorf("%s still reserved", dev.Name)
		}
	}
	if got := testutil.ToFloat64(g.c.metrics.checks.WithLabelValues("reused")); got != 8 {
		t.Errorf("checks reused = %v, want 8", got)
	}
}

// What moves a claimed device's generation before the release makes the
// release fall back to today's check, which refuses: the quarantine trait
// set after the claim (the read's traits are unknown; the check reads
// them), or an allocation (someone un-reserved the device and Nova
// scheduled onto it; the read shows the consumer). An allocation after
// the release's read is the window the reuse trades: the check answers
// from the read, but the un-reserve's PUT at the read's generation fails
// with 409, and the re-read refuses. Every device stays reserved.
func TestE2EReleaseAfterClaimFallsBackAndRefuses(t *testing.T) {
	h, devs, g, inst := claimedInstance(t, 3)
	ctx := context.Background()
	claimInstance(t, g, inst, devs)
	h.must("DELETE", "/allocations/"+inst, nil, nil, 204)
	quar, alloc, late := devs[0], devs[1], devs[2]
	var cur struct {
		Gen    int      `json:"resource_provider_generation"`
		Traits []string `json:"traits"`
	}
	h.must("GET", "/resource_providers/"+quar.UUID+"/traits", nil, &cur, 200)
	h.must("PUT", "/resource_providers/"+quar.UUID+"/traits", map[string]any{
		"resource_provider_generation": cur.Gen, "traits": append(cur.Traits, DefaultQuarantineTrait)}, nil, 200)
	h.reallocate(newUUID(), alloc)

	for _, dev := range []Ref{quar, alloc} {
		d, err := g.ReadDevice(ctx, dev)
		if err != nil {
			t.Fatal(err)
		}
		if d.traitsRead {
			t.Errorf("release read of %s knows its traits after its generation moved", dev.Name)
		}
		before := g.c.Calls()
		if in, err := checkAsOf(ctx, g, dev.UUID); !in || err != nil {
			t.Errorf("check of %s = %v, %v; want refused", dev.Name, in, err)
		}
		if g.c.Calls() == before {
			t.Errorf("check of %s asked Placement nothing", dev.Name)
		}
		if err := g.Unreserve(ctx, dev, ""); err == nil {
			t.Errorf("un-reserve of %s succeeded", dev.Name)
		}
	}
	if reused := testutil.ToFloat64(g.c.metrics.checks.WithLabelValues("reused")); reused != 0 {
		t.Errorf("checks reused = %v, want 0", reused)
	}

	d, err := g.ReadDevice(ctx, late)
	if err != nil || !d.traitsRead {
		t.Fatalf("release read of %s: %v, traits known %v", late.Name, err, d.traitsRead)
	}
	if in, err := checkAsOf(ctx, g, late.UUID); in || err != nil {
		t.Fatalf("check of %s = %v, %v; want dirty from the read", late.Name, in, err)
	}
	h.reallocate(newUUID(), late) // ... while the device is being cleaned
	if err := g.Unreserve(ctx, late, ""); !errors.Is(err, ErrAllocated) {
		t.Errorf("un-reserve after an allocation during the cleaning: %v, want ErrAllocated", err)
	}
	for _, dev := range devs {
		if h.reserved(dev) != 1 {
			t.Errorf("%s un-reserved", dev.Name)
		}
	}
}
