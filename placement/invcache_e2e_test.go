package placement

import (
	"context"
	"encoding/json"
	"testing"
)

// The release of a device Nova burned, as it happens in production: the
// claim's burn check reads the inventory (already burned: nothing
// written), Nova deletes the instance's allocations (DELETE
// /allocations/{instance}, which moves no provider generation), and the
// release reads the device. Its allocations come back at the generation
// of the claim's inventory read, so that inventory stands: one call. The
// device returns to the pool with the pre-destructive check's listing and
// the guarded PUT, every field but reserved as Placement has it.
func TestE2EReleaseAfterInstanceDeleteReadsOnce(t *testing.T) {
	h, dev, c, inst := claimedDevice(t, map[string]any{"allocation_ratio": 1.37})
	ctx := context.Background()
	h.must("DELETE", "/allocations/"+inst, nil, nil, 204) // Nova deletes the instance
	if _, err := c.nodeRP(ctx); err != nil {              // once per client, not per release
		t.Fatal(err)
	}
	before := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	start := c.Calls()
	d, err := c.ReadDevice(ctx, dev)
	if err != nil || d.State != StateDirty || d.Used != 0 || len(d.Consumers) != 0 {
		t.Fatalf("ReadDevice after the instance's allocations were deleted = %v used=%d consumers=%v %v, want dirty, unallocated", d.State, d.Used, d.Consumers, err)
	}
	if n := c.Calls() - start; n != 1 {
		t.Errorf("release read made %d calls, want 1 (allocations; the inventory read at the claim is at the same generation)", n)
	}
	if d, err = c.ConfirmShared(ctx, d); err != nil || d.State != StateDirty || d.Quarantined {
		t.Fatalf("ConfirmShared = %v quarantined=%v %v, want dirty", d.State, d.Quarantined, err)
	}
	if err := c.UnreserveSeen(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	if n := c.Calls() - start; n != 3 {
		t.Errorf("release to pool made %d calls, want 3 (allocations, listing, PUT)", n)
	}
	assertOnlyReservedChanged(t, before, h.rawInv(dev, "CUSTOM_PCI_144D_A80A"), "0")
}

// An inventory remembered from the claim is never written back once
// anything moved the generation: here an operator changes the device's
// allocation ratio between the claim and the release. The release reads
// the inventory afresh (2 calls) and the un-reserve sends the operator's
// value back, not the remembered one.
func TestE2EReleaseAfterInventoryChangeReadsItAfresh(t *testing.T) {
	h, dev, c, inst := claimedDevice(t, nil)
	ctx := context.Background()
	inv := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	inv["allocation_ratio"] = json.RawMessage("3.0")
	h.must("PUT", "/resource_providers/"+dev.UUID+"/inventories/CUSTOM_PCI_144D_A80A", inv, nil, 200)
	h.must("DELETE", "/allocations/"+inst, nil, nil, 204)
	start := c.Calls()
	d, err := c.ReadDevice(ctx, dev)
	if err != nil || d.State != StateDirty || d.Inventory.AllocationRatio != 3 {
		t.Fatalf("ReadDevice = %v allocation_ratio=%v %v, want dirty with the operator's 3.0", d.State, d.Inventory.AllocationRatio, err)
	}
	if n := c.Calls() - start; n != 2 {
		t.Errorf("release read made %d calls, want 2 (the remembered inventory is from an older generation)", n)
	}
	if d, err = c.ConfirmShared(ctx, d); err == nil {
		err = c.UnreserveSeen(ctx, d, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	if string(after["allocation_ratio"]) != "3.0" || string(after["reserved"]) != "0" {
		t.Errorf("after the un-reserve: allocation_ratio %s reserved %s, want the operator's 3.0 and 0", after["allocation_ratio"], after["reserved"])
	}
}

// Nova with deferred delete (reclaim_instance_interval > 0) removes the
// allocations with PUT /allocations/{instance} {}, which does move the
// generation; and a new consumer allocated meanwhile (un-reserved by
// someone, scheduled, burned) moves it too. Either way the release reads
// the device afresh and sees what holds it now.
func TestE2EReleaseAfterGenerationMovedSeesNewConsumer(t *testing.T) {
	h, dev, c, inst := claimedDevice(t, nil)
	ctx := context.Background()
	var cur struct {
		Gen *int `json:"consumer_generation"`
	}
	h.must("GET", "/allocations/"+inst, nil, &cur, 200)
	h.must("PUT", "/allocations/"+inst, map[string]any{"allocations": map[string]any{}, "project_id": "p-e2e", "user_id": "u-e2e",
		"consumer_generation": cur.Gen, "consumer_type": "INSTANCE"}, nil, 204)
	next := newUUID()
	h.reallocate(next, dev)
	d, err := c.ReadDevice(ctx, dev)
	if err != nil || d.State != StateBurnedInUse || len(d.Consumers) != 1 || d.Consumers[0] != next {
		t.Fatalf("ReadDevice = %v consumers=%v %v, want burned-in-use by %s", d.State, d.Consumers, err, next)
	}
	if err := c.UnreserveSeen(ctx, d, nil); err == nil || h.reserved(dev) != 1 {
		t.Fatalf("UnreserveSeen of an allocated device = %v, reserved %d: want a refusal and the device reserved", err, h.reserved(dev))
	}
}

// claimedDevice seeds a device Nova burned for an instance and lets a new
// client's claim check (Burn: already burned, nothing written) read it.
func claimedDevice(t *testing.T, fields map[string]any) (*seedHost, Ref, *Client, string) {
	t.Helper()
	env := testPlacement(t)
	h := seedNode(t, env)
	inst := newUUID()
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1, Consumer: inst, Fields: fields})
	c := newE2EClient(t, env, h.Node)
	if err := c.Burn(context.Background(), dev); err != nil {
		t.Fatal(err)
	}
	return h, dev, c, inst
}
