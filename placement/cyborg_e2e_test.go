package placement

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"testing"
)

// Cyborg-shaped providers in the real Placement, created the way Cyborg's
// conductor creates them (openstack/cyborg conductor/manager.py,
// common/placement_client.py, read at 24e13c6): the provider of a
// deployable is named after the deployable, its UUID is
// uuid3(NAMESPACE_DNS, name), its parent is the compute node found by
// name; the inventory is PUT as {rc: {total, max_unit}} only; traits are
// added by reading the provider's traits and PUTting their union.

// uuid3 is Python's uuid.uuid3(uuid.NAMESPACE_DNS, name).
func uuid3(name string) string {
	ns := []byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := md5.Sum(append(ns, name...))
	h[6] = h[6]&0x0f | 0x30
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func TestUUID3MatchesPython(t *testing.T) {
	// python3 -c 'import uuid; print(uuid.uuid3(uuid.NAMESPACE_DNS, "python.org"))'
	if got, want := uuid3("python.org"), "6fa459ea-ee8a-3ca4-894e-db77e160355e"; got != want {
		t.Fatalf("uuid3 = %s, want %s", got, want)
	}
}

// seedCyborg reports one deployable as Cyborg's conductor does
// (provider_report): ensure the provider, PUT its inventory, add traits.
func (h *seedHost) seedCyborg(name, rc string, total int, traits ...string) Ref {
	h.t.Helper()
	ref := Ref{UUID: uuid3(name), Name: name}
	ref.Address, _ = parseAddress(name)
	if isCustom(rc) { // ensure_resource_classes skips the standard ones
		h.must("PUT", "/resource_classes/"+rc, nil, nil, 201, 204)
	}
	h.must("POST", "/resource_providers", map[string]any{"uuid": ref.UUID, "name": name, "parent_provider_uuid": h.NodeUUID}, nil, 200)
	h.cyborgInventory(ref, rc, total)
	for _, tr := range traits {
		if isCustom(tr) {
			h.must("PUT", "/traits/"+tr, nil, nil, 201, 204)
		}
	}
	var cur struct {
		Traits []string `json:"traits"`
		Gen    int      `json:"resource_provider_generation"`
	}
	h.must("GET", "/resource_providers/"+ref.UUID+"/traits", nil, &cur, 200)
	h.must("PUT", "/resource_providers/"+ref.UUID+"/traits", map[string]any{
		"resource_provider_generation": cur.Gen, "traits": append(cur.Traits, traits...)}, nil, 200)
	return ref
}

// cyborgInventory is the conductor's update_inventory of
// _gen_resource_inventory(rc, total): total and max_unit only, at the
// generation just read. Also what it does when num_accelerators changes:
// reserved falls back to its default, 0.
func (h *seedHost) cyborgInventory(ref Ref, rc string, total int) {
	h.cyborgPut(ref, rc, map[string]any{"total": total, "max_unit": total})
}

// cyborgReserved is Cyborg's update_rp_inventory_reserved (device disable
// and enable): {rc: {total, reserved}} at microversion 1.26.
func (h *seedHost) cyborgReserved(ref Ref, rc string, total, reserved int) {
	h.cyborgPut(ref, rc, map[string]any{"total": total, "reserved": reserved})
}

// cyborgPut is Cyborg's update_inventory: read the provider's generation,
// PUT every inventory at it.
func (h *seedHost) cyborgPut(ref Ref, rc string, inv map[string]any) {
	h.t.Helper()
	var rp struct {
		Gen int `json:"generation"`
	}
	h.must("GET", "/resource_providers/"+ref.UUID, nil, &rp, 200)
	h.must("PUT", "/resource_providers/"+ref.UUID+"/inventories", map[string]any{
		"resource_provider_generation": rp.Gen, "inventories": map[string]any{rc: inv},
	}, nil, 200)
}

// tryAllocate is the scheduler's claim of units of rc on dev for
// consumer: Placement answers 204, or 409 when the device lacks capacity.
func (h *seedHost) tryAllocate(consumer string, dev Ref, rc string, units int) int {
	h.t.Helper()
	code, _ := h.call("PUT", "/allocations/"+consumer, map[string]any{
		"allocations": map[string]any{dev.UUID: map[string]any{"resources": map[string]int{rc: units}}},
		"project_id":  "p-e2e", "user_id": "u-e2e", "consumer_generation": nil, "consumer_type": "INSTANCE",
	})
	return code
}

func (h *seedHost) inv(dev Ref, rc string) (reserved, total, maxUnit int) {
	h.t.Helper()
	raw := h.rawInv(dev, rc)
	_ = json.Unmarshal(raw["reserved"], &reserved)
	_ = json.Unmarshal(raw["total"], &total)
	_ = json.Unmarshal(raw["max_unit"], &maxUnit)
	return
}

// cyborgOn manages Cyborg's devices from Placement alone: these tests
// prove the fence, so no Cyborg API (its ARQs) is read (a static token
// would need placement.cyborg.endpoint for that).
func cyborgOn(traits ...string) func(*Config) {
	return func(c *Config) {
		noARQs := false
		c.Cyborg = CyborgConfig{Enabled: true, Traits: traits, ResourceClasses: []string{"FPGA", "PGPU"}, ReadARQs: &noARQs}
	}
}

func scanOne(t *testing.T, c *Client, uuid string) Device {
	t.Helper()
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Devices {
		if d.UUID == uuid {
			return d
		}
	}
	t.Fatalf("scan did not list %s: %+v", uuid, res.Devices)
	return Device{}
}

// TestE2ECyborgDeviceFencedWholeAndReturnedWhole: an FPGA deployable of 4
// units (a Xilinx-driver name, <host>_<PCI address>) and a PGPU of 1
// (the NVIDIA driver's shape, OWNER_CYBORG). A bound unit fences the
// whole device; while it is fenced no unit can be allocated, neither
// while the tenant holds its unit nor after it freed it (this part fails
// if Burn does not fence); the un-reserve returns every unit at once and
// keeps max_unit.
func TestE2ECyborgDeviceFencedWholeAndReturnedWhole(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	fpga := h.seedCyborg(h.Node+"_0000:3b:00.0", "FPGA", 4, "CUSTOM_FPGA_XILINX", "CUSTOM_SCOUR_E2E_CYBORG")
	gpu := h.seedCyborg(h.Node+"_0000:af:00.0", "PGPU", 1, "OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8")
	other := h.seedCyborg(h.Node+"_0000:5e:00.0", "CUSTOM_QAT", 8, "OWNER_CYBORG")
	c := newE2EClient(t, env, h.Node, cyborgOn("OWNER_CYBORG", "CUSTOM_SCOUR_E2E_CYBORG"))
	ctx := context.Background()

	for _, d := range []Ref{fpga, gpu} {
		got := scanOne(t, c, d.UUID)
		if !got.Cyborg || got.State != StateAvailable {
			t.Fatalf("%s: Cyborg %v state %s (%s), want a Cyborg device, available", d.Name, got.Cyborg, got.State, got.Why)
		}
	}
	if got := scanOne(t, c, other.UUID); got.State != StateUnmanaged {
		t.Fatalf("CUSTOM_QAT device (not configured): state %s, want unmanaged", got.State)
	}

	tenant := newUUID()
	if code := h.tryAllocate(tenant, fpga, "FPGA", 1); code != 204 {
		t.Fatalf("binding one FPGA unit: HTTP %d", code)
	}
	if got := scanOne(t, c, fpga.UUID); got.State != StateInUse {
		t.Fatalf("bound: state %s, want in-use", got.State)
	}
	if err := c.Burn(ctx, fpga); err != nil {
		t.Fatalf("fence at bind: %v", err)
	}
	if r, tot, mu := h.inv(fpga, "FPGA"); r != 4 || tot != 4 || mu != 4 {
		t.Fatalf("after the fence: reserved %d total %d max_unit %d, want 4 4 4", r, tot, mu)
	}
	if code := h.tryAllocate(newUUID(), fpga, "FPGA", 1); code != 409 {
		t.Fatalf("another tenant's unit on the fenced card while the first holds one: HTTP %d, want 409", code)
	}
	h.must("DELETE", "/allocations/"+tenant, nil, nil, 204)
	if got := scanOne(t, c, fpga.UUID); got.State != StateDirty {
		t.Fatalf("freed: state %s, want dirty", got.State)
	}
	// The freed unit must not be schedulable before the clean.
	next := newUUID()
	if code := h.tryAllocate(next, fpga, "FPGA", 1); code != 409 {
		t.Fatalf("a unit of the dirty card was allocated to the next tenant: HTTP %d, want 409 (the fence is missing)", code)
	}
	if err := c.Unreserve(ctx, fpga, nil); err != nil {
		t.Fatalf("return after the clean: %v", err)
	}
	if r, tot, mu := h.inv(fpga, "FPGA"); r != 0 || tot != 4 || mu != 4 {
		t.Fatalf("after the return: reserved %d total %d max_unit %d, want 0 4 4", r, tot, mu)
	}
	if code := h.tryAllocate(next, fpga, "FPGA", 4); code != 204 {
		t.Fatalf("all 4 units after the return: HTTP %d, want 204", code)
	}

	// The PGPU (total 1) goes the same way.
	g := newUUID()
	if code := h.tryAllocate(g, gpu, "PGPU", 1); code != 204 {
		t.Fatalf("binding the PGPU: HTTP %d", code)
	}
	if err := c.Burn(ctx, gpu); err != nil {
		t.Fatal(err)
	}
	h.must("DELETE", "/allocations/"+g, nil, nil, 204)
	if got := scanOne(t, c, gpu.UUID); got.State != StateDirty || !got.Cyborg {
		t.Fatalf("PGPU freed: state %s cyborg %v, want dirty", got.State, got.Cyborg)
	}
	if err := c.Unreserve(ctx, gpu, nil); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := h.inv(gpu, "PGPU"); r != 0 {
		t.Fatalf("PGPU reserved %d after the return, want 0", r)
	}
}

// TestE2ECyborgFenceUndoneIsSeenAndRefenced: both ways the fence can be
// lifted behind scour, played as Cyborg plays them against the real
// Placement, show in the next scan as a free device below reserved=total,
// and Refence puts reserved=total back with every other field kept.
func TestE2ECyborgFenceUndoneIsSeenAndRefenced(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	fpga := h.seedCyborg(h.Node+"_0000:3b:00.0", "FPGA", 4, "OWNER_CYBORG")
	c := newE2EClient(t, env, h.Node, cyborgOn("OWNER_CYBORG"))
	ctx := context.Background()
	scanOne(t, c, fpga.UUID)
	tenant := newUUID()
	if code := h.tryAllocate(tenant, fpga, "FPGA", 2); code != 204 {
		t.Fatalf("bind: HTTP %d", code)
	}
	if err := c.Burn(ctx, fpga); err != nil {
		t.Fatal(err)
	}
	h.must("DELETE", "/allocations/"+tenant, nil, nil, 204)

	// Cyborg's enable and disable PUT total and reserved only, so
	// Placement resets max_unit to its default (2147483647); the
	// conductor's rewrite puts max_unit = total back. Scour's Refence
	// keeps whatever it finds.
	for _, undo := range []struct {
		name    string
		do      func()
		maxUnit int
	}{
		{"openstack accelerator device enable", func() { h.cyborgReserved(fpga, "FPGA", 4, 0) }, 2147483647},
		{"conductor inventory rewrite (num_accelerators changed)", func() { h.cyborgInventory(fpga, "FPGA", 4) }, 4},
	} {
		undo.do()
		got := scanOne(t, c, fpga.UUID)
		if got.Inventory.Reserved != 0 || (got.Used > 0 || len(got.Consumers) > 0) || !got.Cyborg {
			t.Fatalf("%s: scan shows reserved %d consumers %v cyborg %v, want an un-fenced free Cyborg device", undo.name, got.Inventory.Reserved, got.Consumers, got.Cyborg)
		}
		if code := h.tryAllocate(newUUID(), fpga, "FPGA", 1); code != 204 {
			// Proves the undo really makes the dirty card schedulable.
			t.Fatalf("%s: allocation on the un-fenced card: HTTP %d, want 204", undo.name, code)
		}
		h.cleanupConsumersOf(fpga)
		if err := c.Refence(ctx, fpga); err != nil {
			t.Fatalf("%s: Refence: %v", undo.name, err)
		}
		if r, tot, mu := h.inv(fpga, "FPGA"); r != 4 || tot != 4 || mu != undo.maxUnit {
			t.Fatalf("%s: after Refence reserved %d total %d max_unit %d, want 4 4 %d", undo.name, r, tot, mu, undo.maxUnit)
		}
		if code := h.tryAllocate(newUUID(), fpga, "FPGA", 1); code != 409 {
			t.Fatalf("%s: allocation after Refence: HTTP %d, want 409", undo.name, code)
		}
	}
}

// cleanupConsumersOf deletes every allocation on dev.
func (h *seedHost) cleanupConsumersOf(dev Ref) {
	h.t.Helper()
	var al struct {
		Allocations map[string]any `json:"allocations"`
	}
	h.must("GET", "/resource_providers/"+dev.UUID+"/allocations", nil, &al, 200)
	for consumer := range al.Allocations {
		h.must("DELETE", "/allocations/"+consumer, nil, nil, 204)
	}
}
