package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestE2EScanDerivesEveryState(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	avail := h.seedDevice(devSpec{Addr: "0000:81:00.0"})
	inUse := h.seedDevice(devSpec{Addr: "0000:82:00.0"})
	inst1, inst2 := newUUID(), newUUID()
	burned := h.seedDevice(devSpec{Addr: "0000:83:00.0", Reserved: 1, Consumer: inst2})
	dirty := h.seedDevice(devSpec{Addr: "0000:af:00.0", Reserved: 1})
	quar := h.seedDevice(devSpec{Addr: "0000:b0:00.0", Reserved: 1, Quarantined: true})
	big := h.seedDevice(devSpec{Addr: "0000:b1:00.0", Total: 2})
	two := h.seedDevice(devSpec{Addr: "0000:b2:00.0", Extra: map[string]any{"CUSTOM_PCI_EXTRA": map[string]any{"total": 1}}})
	h.seedDevice(devSpec{Addr: "0000:c0:00.0", NoOTU: true}) // not one-time-use: must not appear
	h.allocateDevice(inst1, inUse)

	c := newE2EClient(t, env, h.Node)
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]State{}
	for _, d := range res.Devices {
		got[d.UUID] = d.State
	}
	want := map[string]State{
		avail.UUID: StateAvailable, inUse.UUID: StateInUse, burned.UUID: StateBurnedInUse,
		dirty.UUID: StateDirty, quar.UUID: StateQuarantined, big.UUID: StateUnmanaged, two.UUID: StateUnmanaged,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	for _, d := range res.Devices {
		if d.UUID == dirty.UUID && (d.Address != "0000:af:00.0" || d.Inventory.Reserved != 1 || d.Inventory.ResourceClass != "CUSTOM_PCI_144D_A80A") {
			t.Errorf("dirty device read as %+v", d)
		}
		if d.UUID == inUse.UUID && (!slices.Equal(d.Consumers, []string{inst1}) || d.Used != 1) {
			t.Errorf("in-use device consumers %v used %d, want [%s] 1", d.Consumers, d.Used, inst1)
		}
	}
	// First scan: node lookup + 2 lists + 2 per device. Later scans reuse
	// the node's UUID.
	if n := len(res.Devices); res.Calls != 3+2*n {
		t.Errorf("first scan made %d calls for %d devices, want %d", res.Calls, n, 3+2*n)
	}
	res2, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Nothing changed: each device's allocations come back at the
	// generation its inventory was read at, so the inventory is not read
	// again.
	if n := len(res2.Devices); res2.Calls != 2+n {
		t.Errorf("second scan made %d calls for %d devices, want %d (2 lists + 1 allocations read each)", res2.Calls, n, 2+n)
	}
	// Two devices change behind the client: one is allocated, one gets a
	// new allocation ratio from an operator. Each moved its generation, so
	// the third scan reads both inventories afresh and sees both changes.
	inst3 := newUUID()
	h.allocateDevice(inst3, avail)
	inv := h.rawInv(dirty, "CUSTOM_PCI_144D_A80A")
	inv["allocation_ratio"] = json.RawMessage("2.5")
	h.must("PUT", "/resource_providers/"+dirty.UUID+"/inventories/CUSTOM_PCI_144D_A80A", inv, nil, 200)
	res3, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res3.Devices); res3.Calls != 2+n+2 {
		t.Errorf("third scan made %d calls for %d devices with 2 changed, want %d", res3.Calls, n, 2+n+2)
	}
	for _, d := range res3.Devices {
		if d.UUID == avail.UUID && (d.State != StateInUse || !slices.Equal(d.Consumers, []string{inst3})) {
			t.Errorf("device allocated since the last scan read as %s held by %v, want in-use by %s", d.State, d.Consumers, inst3)
		}
		if d.UUID == dirty.UUID && (d.State != StateDirty || d.Inventory.AllocationRatio != 2.5) {
			t.Errorf("device whose inventory changed since the last scan read as %s with allocation_ratio %v, want dirty with 2.5", d.State, d.Inventory.AllocationRatio)
		}
	}
	// Device (the pipeline's single-device read) agrees with the scan.
	d, err := c.Device(context.Background(), quar)
	if err != nil || d.State != StateQuarantined {
		t.Errorf("Device(quarantined) = %v, %v", d.State, err)
	}
}

func TestE2EComputeNodeRecreated(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	h.seedDevice(devSpec{Addr: "0000:81:00.0"})
	c := newE2EClient(t, env, h.Node)
	if res, err := c.Scan(context.Background()); err != nil || len(res.Devices) != 1 {
		t.Fatalf("first scan: %v, %v", res, err)
	}
	// The node RP is deleted and re-created under the same name (new UUID).
	h.cleanup()
	h2 := seedNodeNamed(t, env, h.Node)
	d := h2.seedDevice(devSpec{Addr: "0000:82:00.0", Reserved: 1})
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.NodeUUID != h2.NodeUUID || len(res.Devices) != 1 || res.Devices[0].UUID != d.UUID || res.Devices[0].State != StateDirty {
		t.Errorf("scan after re-creation: node %s devices %+v, want node %s with %s dirty", res.NodeUUID, res.Devices, h2.NodeUUID, d.UUID)
	}
	inst := newUUID()
	h2.allocate(inst, map[string]map[string]int{h2.NodeUUID: {"VCPU": 1}})
	claim, err := c.InstanceDevices(context.Background(), inst)
	if err != nil || claim.Compute["VCPU"] != 1 {
		t.Errorf("InstanceDevices after re-creation: %+v, %v", claim, err)
	}
}

func TestE2EScanUnknownNode(t *testing.T) {
	env := testPlacement(t)
	c := newE2EClient(t, env, "no-such-node-"+newUUID())
	_, err := c.Scan(context.Background())
	if !errors.Is(err, ErrNotFound) || IsRecoverable(err) {
		t.Fatalf("Scan of an unknown node: %v, want ErrNotFound, not recoverable", err)
	}
}

func TestE2EBurn(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Fields: map[string]any{"allocation_ratio": 1.37, "max_unit": 1}})
	idle := h.seedDevice(devSpec{Addr: "0000:82:00.0"})
	h.allocateDevice(newUUID(), dev)
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()

	before := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	if err := c.Burn(ctx, dev); err != nil {
		t.Fatal(err)
	}
	after := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	assertOnlyReservedChanged(t, before, after, "1")
	// Idempotent: no second write (the generation does not move).
	if err := c.Burn(ctx, dev); err != nil {
		t.Fatal(err)
	}
	if again := h.rawInv(dev, "CUSTOM_PCI_144D_A80A"); string(again["resource_provider_generation"]) != string(after["resource_provider_generation"]) {
		t.Errorf("second Burn wrote: generation %s -> %s", after["resource_provider_generation"], again["resource_provider_generation"])
	}
	if err := c.Burn(ctx, idle); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("Burn of an unallocated device: %v, want ErrNotAllocated", err)
	}
	if h.reserved(idle) != 0 {
		t.Error("Burn of an unallocated device changed reserved")
	}
}

// assertOnlyReservedChanged compares two raw GETs of one inventory: every
// field byte-for-byte equal except reserved (== wantReserved) and the
// generation (bumped by exactly one).
func assertOnlyReservedChanged(t *testing.T, before, after map[string]json.RawMessage, wantReserved string) {
	t.Helper()
	for k, v := range before {
		switch k {
		case "reserved":
			if string(after[k]) != wantReserved {
				t.Errorf("reserved = %s, want %s", after[k], wantReserved)
			}
		case "resource_provider_generation":
			var b, a int
			_ = json.Unmarshal(v, &b)
			_ = json.Unmarshal(after[k], &a)
			if a != b+1 {
				t.Errorf("generation %d -> %d, want exactly one write", b, a)
			}
		default:
			if string(after[k]) != string(v) {
				t.Errorf("field %s changed: %s -> %s", k, v, after[k])
			}
		}
	}
	if len(after) != len(before) {
		t.Errorf("fields before %v, after %v", before, after)
	}
}

func TestE2EUnreservePreservesEveryField(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	// Non-default values everywhere, so a reset to defaults would show.
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1,
		Fields: map[string]any{"allocation_ratio": 1.37, "max_unit": 1, "min_unit": 1, "step_size": 1}})
	odd := h.seedDevice(devSpec{Addr: "0000:82:00.0", Reserved: 1,
		Fields: map[string]any{"allocation_ratio": 0.3333333333333333, "max_unit": 1}})
	c := newE2EClient(t, env, h.Node)
	for _, d := range []Ref{dev, odd} {
		before := h.rawInv(d, "CUSTOM_PCI_144D_A80A")
		var j MemJournal // the run's, kept across both calls
		if err := c.Unreserve(context.Background(), d, &j); err != nil {
			t.Fatal(err)
		}
		after := h.rawInv(d, "CUSTOM_PCI_144D_A80A")
		assertOnlyReservedChanged(t, before, after, "0")
		// Never below 0, and a second call (a resumed run) writes nothing.
		if err := c.Unreserve(context.Background(), d, &j); err != nil {
			t.Fatal(err)
		}
		again := h.rawInv(d, "CUSTOM_PCI_144D_A80A")
		if string(again["reserved"]) != "0" || string(again["resource_provider_generation"]) != string(after["resource_provider_generation"]) {
			t.Errorf("second Unreserve: %v -> %v", after, again)
		}
	}
}

func TestE2EUnreserveRefusesAllocatedDevice(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	inst := newUUID()
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1, Consumer: inst})
	c := newE2EClient(t, env, h.Node)
	err := c.Unreserve(context.Background(), dev, nil)
	if !errors.Is(err, ErrAllocated) || IsRecoverable(err) {
		t.Fatalf("Unreserve of an allocated device: %v, want ErrAllocated", err)
	}
	var de *DeviceError
	if !errors.As(err, &de) || de.Dev.UUID != dev.UUID {
		t.Errorf("error does not name the device: %v", err)
	}
	if h.reserved(dev) != 1 {
		t.Error("reserved changed on an allocated device")
	}
	has, who, err := c.HasAllocations(context.Background(), dev)
	if err != nil || !has || !slices.Equal(who, []string{inst}) {
		t.Errorf("HasAllocations = %v %v %v", has, who, err)
	}
}

func TestE2EUnreserveRefusesAllocationCreatedBeforeWrite(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	c := newE2EClient(t, env, h.Node)
	inst := newUUID()
	raced := 0
	// Between scour's check (no allocations) and its PUT, the device is
	// allocated again.
	c.beforeInventoryWrite = func(context.Context, string) {
		if raced == 0 {
			h.reallocate(inst, dev)
		}
		raced++
	}
	err := c.Unreserve(context.Background(), dev, nil)
	if !errors.Is(err, ErrAllocated) {
		t.Fatalf("Unreserve with an allocation raced in: %v, want ErrAllocated", err)
	}
	if raced != 1 {
		t.Errorf("write attempted %d times, want 1 (the re-read must see the allocation)", raced)
	}
	if h.reserved(dev) != 1 {
		t.Error("device un-reserved while allocated")
	}
}

func TestE2EUnreserveWithConcurrentWriters(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1, Fields: map[string]any{"allocation_ratio": 1.37}})
	c := newE2EClient(t, env, h.Node, func(c *Config) {
		c.Retry = RetryConfig{Attempts: 200, Base: 2 * time.Millisecond, Max: 50 * time.Millisecond, Budget: 60 * time.Second}
	})
	before := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	var writes atomic.Int32
	// On scour's first attempt, hold the PUT until the provider's
	// generation has moved past one read after scour's own read: the
	// first PUT then surely conflicts, and the retry path (re-read,
	// re-verify, re-write) is what gets tested. (Counting the writers'
	// wins instead raced: a win committed before scour's read could be
	// counted after it.)
	generation := func() int {
		var rp struct {
			Gen int `json:"generation"`
		}
		api{t: t, env: env}.must("GET", "/resource_providers/"+dev.UUID, nil, &rp, 200)
		return rp.Gen
	}
	c.beforeInventoryWrite = func(context.Context, string) {
		if writes.Add(1) == 1 {
			for g0 := generation(); generation() <= g0; {
				time.Sleep(time.Millisecond)
			}
		}
	}
	putsOK := func() float64 { return testutil.ToFloat64(c.metrics.requests.WithLabelValues("PUT", "ok")) }
	okBefore := putsOK()

	// 20 writers each add their own trait, generation-safely (re-PUTs bump
	// the RP generation), at least 3 times and until scour is done.
	const writers = 20
	var wg sync.WaitGroup
	scourDone := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := api{t: t, env: env}
			name := fmt.Sprintf("CUSTOM_E2E_WRITER_%d", i)
			a.must("PUT", "/traits/"+name, nil, nil, 201, 204)
			for done := 0; ; {
				select {
				case <-scourDone:
					if done >= 3 {
						return
					}
				default:
				}
				var cur struct {
					Gen    int      `json:"resource_provider_generation"`
					Traits []string `json:"traits"`
				}
				a.must("GET", "/resource_providers/"+dev.UUID+"/traits", nil, &cur, 200)
				if !slices.Contains(cur.Traits, name) {
					cur.Traits = append(cur.Traits, name)
				}
				code, body := a.call("PUT", "/resource_providers/"+dev.UUID+"/traits", map[string]any{"resource_provider_generation": cur.Gen, "traits": cur.Traits})
				switch {
				case code == 200:
					done++
				case code == 409, code == 500 && strings.Contains(string(body), lostRace):
					// 409: stale generation. 500: placement's traits
					// handler losing a generation race to another
					// worker (lostRace). Both mean: re-read and retry;
					// any other 5xx is a failure.
				default:
					t.Errorf("writer %d: HTTP %d %s", i, code, body)
					return
				}
			}
		}()
	}
	err := c.Unreserve(context.Background(), dev, nil)
	close(scourDone)
	wg.Wait()
	if err != nil {
		t.Fatalf("Unreserve under 20 concurrent writers: %v", err)
	}
	if got := putsOK() - okBefore; got != 1 {
		t.Errorf("scour's successful PUTs = %v, want exactly 1", got)
	}
	if writes.Load() < 2 {
		t.Errorf("scour wrote %d time(s): the conflict path was not exercised", writes.Load())
	}
	t.Logf("scour attempted %d inventory writes to succeed once", writes.Load())
	after := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	for _, k := range []string{"total", "min_unit", "max_unit", "step_size", "allocation_ratio"} {
		if string(before[k]) != string(after[k]) {
			t.Errorf("%s changed %s -> %s", k, before[k], after[k])
		}
	}
	if string(after["reserved"]) != "0" {
		t.Errorf("reserved = %s, want 0", after["reserved"])
	}
	traits := h.traits(dev)
	for i := range writers {
		if name := fmt.Sprintf("CUSTOM_E2E_WRITER_%d", i); !slices.Contains(traits, name) {
			t.Errorf("writer trait %s lost", name)
		}
	}
	for _, tr := range []string{"COMPUTE_MANAGED_PCI_DEVICE", DefaultOneTimeUseTrait} {
		if !slices.Contains(traits, tr) {
			t.Errorf("trait %s lost", tr)
		}
	}
}

func TestE2EQuarantineRoundTrip(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	orig := []string{"COMPUTE_MANAGED_PCI_DEVICE", DefaultOneTimeUseTrait, "CUSTOM_OPERATOR_GOLD"}
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1, Traits: orig})
	fresh := h.seedDevice(devSpec{Addr: "0000:82:00.0"}) // reserved 0
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()

	if err := c.Quarantine(ctx, dev, "sanitize failed"); err != nil {
		t.Fatal(err)
	}
	if err := c.Quarantine(ctx, dev, "again"); err != nil { // idempotent
		t.Fatal(err)
	}
	want := append(slices.Clone(orig), DefaultQuarantineTrait)
	if diff := cmp.Diff(sorted(want), sorted(h.traits(dev))); diff != "" {
		t.Errorf("traits after Quarantine (-want +got):\n%s", diff)
	}
	if d, err := c.Device(ctx, dev); err != nil || d.State != StateQuarantined {
		t.Errorf("state after Quarantine: %v %v", d.State, err)
	}
	if err := c.Unreserve(ctx, dev, nil); !errors.Is(err, ErrQuarantined) {
		t.Errorf("Unreserve of a quarantined device: %v, want ErrQuarantined", err)
	}
	if h.reserved(dev) != 1 {
		t.Fatal("quarantined device was un-reserved")
	}
	if err := c.Unquarantine(ctx, dev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(orig), sorted(h.traits(dev))); diff != "" {
		t.Errorf("traits after Unquarantine (-want +got):\n%s", diff)
	}
	if d, err := c.Device(ctx, dev); err != nil || d.State != StateDirty {
		t.Errorf("state after Unquarantine: %v %v, want dirty (cleaned again before returning)", d.State, err)
	}
	// Quarantining a device that is not reserved reserves it.
	if err := c.Quarantine(ctx, fresh, "wear limit"); err != nil {
		t.Fatal(err)
	}
	if h.reserved(fresh) != 1 {
		t.Error("Quarantine left the device schedulable (reserved 0)")
	}
}

func TestE2EInstanceDevices(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	d1 := h.seedDevice(devSpec{Addr: "0000:81:00.0"})
	d2 := h.seedDevice(devSpec{Addr: "0000:82:00.0"})
	h.seedDevice(devSpec{Addr: "0000:83:00.0"})
	other := seedNode(t, env) // another host's device held by the same consumer
	od := other.seedDevice(devSpec{Addr: "0000:81:00.0"})
	inst := newUUID()
	h.allocate(inst, map[string]map[string]int{
		h.NodeUUID: {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40},
		d1.UUID:    {"CUSTOM_PCI_144D_A80A": 1},
		d2.UUID:    {"CUSTOM_PCI_144D_A80A": 1},
		od.UUID:    {"CUSTOM_PCI_144D_A80A": 1},
	})
	c := newE2EClient(t, env, h.Node)
	claim, err := c.InstanceDevices(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range claim.Devices {
		got = append(got, d.UUID+"@"+string(d.Address))
	}
	if diff := cmp.Diff([]string{d1.UUID + "@0000:81:00.0", d2.UUID + "@0000:82:00.0"}, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}, claim.Compute); diff != "" {
		t.Errorf("compute resources (-want +got):\n%s", diff)
	}
	if claim.ConsumerType != "INSTANCE" || claim.ProjectID != "p-e2e" {
		t.Errorf("claim metadata %+v", claim)
	}
	none, err := c.InstanceDevices(context.Background(), newUUID())
	if err != nil || len(none.Devices) != 0 {
		t.Errorf("unknown instance: %+v %v", none, err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// The claim's reads (issue 33): the instance's allocations, the listing
// of this host's tree, and one inventory read per device: 2 + 1 per
// device (a full Device read was 3 per device), with each device's
// reserved as Nova left it, so only the unburned one is burned.
func TestE2EInstanceDevicesWithInventories(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	inst := newUUID()
	const n = 8
	res := map[string]map[string]int{h.NodeUUID: {"VCPU": 2}}
	var devs []Ref
	for i := range n {
		d := h.seedDevice(devSpec{Addr: fmt.Sprintf("0000:%02x:00.0", 0x81+i)})
		devs = append(devs, d)
		res[d.UUID] = map[string]int{"CUSTOM_PCI_144D_A80A": 1}
	}
	h.allocate(inst, res)
	for _, d := range devs[1:] { // Nova 2025.2 burned all but the first
		h.setReserved(d, "CUSTOM_PCI_144D_A80A", 1)
	}
	c := newE2EClient(t, env, h.Node)
	if _, err := c.InstanceDevices(context.Background(), newUUID()); err != nil { // finds the node
		t.Fatal(err)
	}
	before := c.Calls()
	claim, err := c.InstanceDevices(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WithInventories(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	if got := c.Calls() - before; got != 2+n {
		t.Errorf("claim reads made %d Placement requests for %d devices, want %d (2 + 1 per device)", got, n, 2+n)
	}
	if len(claim.Devices) != n {
		t.Fatalf("got %d devices, want %d", len(claim.Devices), n)
	}
	for i, d := range claim.Devices {
		want := StateBurnedInUse
		if i == 0 {
			want = StateInUse
		}
		if d.UUID != devs[i].UUID || d.State != want || d.Inventory.Total != 1 || d.Generation == 0 {
			t.Errorf("device %s: state %s total %d generation %d, want %s total 1 and its generation", d.Name, d.State, d.Inventory.Total, d.Generation, want)
		}
	}
}
