package placement

import (
	"context"
	"errors"
	"testing"
)

// The common path of a released device against the real Placement: read
// (2 calls), confirm before the destructive step (1), un-reserve at the
// confirmed generation (1). At most 4 calls, and the PUT still sends every
// inventory field back unchanged but reserved.
func TestE2ECleanedDeviceReturnsInFourCalls(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1, Fields: map[string]any{"allocation_ratio": 1.37}})
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()
	before := h.rawInv(dev, "CUSTOM_PCI_144D_A80A")
	start := c.Calls()
	d, err := c.ReadDevice(ctx, dev)
	if err != nil || d.State != StateDirty {
		t.Fatalf("ReadDevice = %v %v, want dirty", d.State, err)
	}
	if d, err = c.Confirm(ctx, d); err != nil || d.State != StateDirty || d.Quarantined {
		t.Fatalf("Confirm = %v quarantined=%v %v, want dirty", d.State, d.Quarantined, err)
	}
	if err := c.UnreserveSeen(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	calls := c.Calls() - start
	t.Logf("Placement calls for one cleaned device: %d", calls)
	if calls > 4 {
		t.Errorf("Placement calls = %d, want <= 4 (read 2, confirm 1, PUT 1)", calls)
	}
	assertOnlyReservedChanged(t, before, h.rawInv(dev, "CUSTOM_PCI_144D_A80A"), "0")
}

// Safety rule 2 with the generation guard: an allocation written after the
// check before the destructive step (someone returned the device, Nova
// scheduled onto it and burned it) makes the guarded PUT fail with 409;
// the re-read sees the allocation and the device stays reserved.
func TestE2EAllocationDuringCleaningKeepsDeviceReserved(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()
	d, err := c.ReadDevice(ctx, dev)
	if err == nil {
		d, err = c.Confirm(ctx, d) // the pre-destructive check
	}
	if err != nil || d.State != StateDirty {
		t.Fatalf("check = %v %v, want dirty", d.State, err)
	}
	h.reallocate(newUUID(), dev) // ... while the device is being cleaned
	writes := 0
	c.beforeInventoryWrite = func(context.Context, string) { writes++ }
	err = c.UnreserveSeen(ctx, d, nil)
	if !errors.Is(err, ErrAllocated) {
		t.Fatalf("UnreserveSeen after an allocation was written: %v, want ErrAllocated", err)
	}
	if writes != 1 {
		t.Errorf("inventory writes = %d, want 1 (the guarded PUT; the re-read must refuse without writing)", writes)
	}
	if h.reserved(dev) != 1 {
		t.Error("device un-reserved while allocated")
	}
}

// Confirm trusts an earlier read only while the generation has not moved:
// an allocation alone (on a device with capacity) moves it, so Confirm
// reads afresh and sees the consumer.
func TestE2EConfirmSeesAllocationAfterRead(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0"})
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()
	d, err := c.ReadDevice(ctx, dev)
	if err != nil || len(d.Consumers) != 0 {
		t.Fatalf("ReadDevice = %v %v", d.Consumers, err)
	}
	inst := newUUID()
	h.allocateDevice(inst, dev)
	got, err := c.Confirm(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation == d.Generation || len(got.Consumers) != 1 || got.Consumers[0] != inst {
		t.Errorf("Confirm after an allocation: generation %d -> %d, consumers %v; want a new generation and %s",
			d.Generation, got.Generation, got.Consumers, inst)
	}
	if err := c.UnreserveSeen(ctx, got, nil); !errors.Is(err, ErrAllocated) {
		t.Errorf("UnreserveSeen of an allocated device: %v, want ErrAllocated", err)
	}
}

// A quarantine trait set after the read is seen by Confirm, and the
// un-reserve refuses.
func TestE2EConfirmSeesQuarantine(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()
	d, err := c.ReadDevice(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Quarantine(ctx, dev, "test"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Confirm(ctx, d)
	if err != nil || !got.Quarantined {
		t.Fatalf("Confirm after quarantine: quarantined=%v %v", got.Quarantined, err)
	}
	if err := c.UnreserveSeen(ctx, got, nil); !errors.Is(err, ErrQuarantined) {
		t.Errorf("UnreserveSeen of a quarantined device: %v, want ErrQuarantined", err)
	}
	if h.reserved(dev) != 1 {
		t.Error("quarantined device un-reserved")
	}
}

// Safety rules 1 and 5 across a crash between the un-reserve PUT and its
// record, against the real Placement. The PUT landed; while scourd was
// down a tenant got the device, Nova burned it, and the tenant left (its
// notifications lost: no claim tells). The resumed run's un-reserve must
// not return that tenant's data: its journal holds the PUT's generation,
// Placement has moved beyond it, and the device stays reserved. A PUT
// that never landed (the device still at its generation) goes on.
func TestE2EResumedUnreserveAfterAnotherTenantKeepsDeviceReserved(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	used := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	idle := h.seedDevice(devSpec{Addr: "0000:82:00.0", Reserved: 1})
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()

	var j MemJournal // what the claims store keeps for the run
	if err := c.Unreserve(ctx, used, &j); err != nil || h.reserved(used) != 0 || !j.Pending {
		t.Fatalf("first un-reserve: %v, reserved %d, journal %+v", err, h.reserved(used), j)
	}
	// scourd is down: its record still says "cleaned", not "returned".
	inst := newUUID()
	h.allocateDevice(inst, used)
	h.setReserved(used, "CUSTOM_PCI_144D_A80A", 1) // Nova burns it
	h.must("DELETE", "/allocations/"+inst, nil, nil, 204)

	if err := c.Unreserve(ctx, used, &j); !errors.Is(err, ErrStaleReturn) {
		t.Fatalf("resumed un-reserve after another tenant: %v, want ErrStaleReturn", err)
	}
	if h.reserved(used) != 1 {
		t.Error("a device another tenant used was returned without a clean")
	}

	// The other device: its PUT was journaled but never sent (the crash
	// came first); nothing moved, so the resumed run returns it.
	d, err := c.ReadDevice(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	k := MemJournal{Gen: d.Generation, Pending: true}
	if err := c.Unreserve(ctx, idle, &k); err != nil || h.reserved(idle) != 0 {
		t.Fatalf("resumed un-reserve of an untouched device: %v, reserved %d", err, h.reserved(idle))
	}
}
