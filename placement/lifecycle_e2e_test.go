package placement

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/scour-project/scour/e2e/harness"
)

// TestE2EInstanceLifecycleWithHarnessNova drives a device through its life
// with the harness's Nova actions (seeded as nova-compute does, allocated
// by the scheduler, burned by nova-compute, deleted) and checks
// what scour sees and does at each step.
func TestE2EInstanceLifecycleWithHarnessNova(t *testing.T) {
	env := testPlacement(t)
	p := env.P
	otu := harness.Device{Address: "0000:af:00.0", VendorID: "144d", ProductID: "a80a", OneTimeUse: true}
	node := p.SeedComputeNode(t, harness.UniqueName("cn_src"), otu,
		harness.Device{Address: "0000:b0:00.0", VendorID: "144d", ProductID: "a80a"}) // not OTU
	dev := node.Device(otu.Address)
	ref := Ref{UUID: dev.UUID, Name: dev.Name, Address: "0000:af:00.0"}
	c := newE2EClient(t, env, node.Name)
	ctx := context.Background()
	state := func(want State) {
		t.Helper()
		res, err := c.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Devices) != 1 || res.Devices[0].UUID != dev.UUID || res.Devices[0].State != want {
			t.Fatalf("scan: %+v, want only %s in state %s", res.Devices, dev.Name, want)
		}
	}
	state(StateAvailable)

	inst := harness.NewUUID()
	p.AllocateInstance(t, inst, "project", "user", node, dev)
	state(StateInUse)
	if err := c.Burn(ctx, ref); err != nil { // what nova-compute before 2025.2 does not do
		t.Fatal(err)
	}
	p.Burn(t, dev) // and 2025.2's own burn on top: idempotent
	state(StateBurnedInUse)
	claim, err := c.InstanceDevices(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Devices) != 1 || claim.Devices[0].UUID != dev.UUID || claim.Compute["VCPU"] != 1 {
		t.Errorf("InstanceDevices: %+v", claim)
	}

	if err := c.Unreserve(ctx, ref, nil); !errors.Is(err, ErrAllocated) {
		t.Fatalf("Unreserve while the instance holds the device: %v, want ErrAllocated", err)
	}
	// (A migration of this instance is refused by Placement 8.0.0: the
	// migration consumer cannot take over a burned device's allocation,
	// see harness.MoveAllocations.)

	// Delete: the device is dirty and scour returns it, every field kept.
	p.DeleteAllocations(t, inst)
	state(StateDirty)
	before := p.Inventory(t, dev.UUID, dev.ResourceClass)
	if err := c.Unreserve(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	after := p.Inventory(t, dev.UUID, dev.ResourceClass)
	before.Reserved = 0
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("inventory after Unreserve (-want +got):\n%s", diff)
	}
	state(StateAvailable)
}
