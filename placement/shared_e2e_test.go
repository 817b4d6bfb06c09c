package placement

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// Released devices checked together share one listing: each costs its
// read (2 calls) and its PUT (1), and the group's checks 1 or 2 listings
// (the first device's, then one for all that asked meanwhile). The checks
// start together once every read is back: against a Placement with
// several workers, reads return spread out, and a device whose read
// returns after the second listing began would ask for a third (correct,
// and what the release handler's batches see; not what this test counts).
func TestE2EReleasedDevicesReturnInThreeCallsEach(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	var devs []Ref
	for _, a := range []string{"0000:81:00.0", "0000:82:00.0", "0000:83:00.0", "0000:84:00.0"} {
		devs = append(devs, h.seedDevice(devSpec{Addr: a, Reserved: 1}))
	}
	c := newE2EClient(t, env, h.Node)
	ctx := context.Background()
	if _, err := c.nodeRP(ctx); err != nil { // once per client, not per release
		t.Fatal(err)
	}
	start := c.Calls()
	var wg, read sync.WaitGroup
	read.Add(len(devs))
	errs := make([]error, len(devs))
	for i, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.ReadDevice(ctx, dev)
			read.Done()
			read.Wait()
			if err == nil {
				d, err = c.ConfirmShared(ctx, d)
			}
			if err == nil && (d.State != StateDirty || d.Quarantined || !d.traitsRead) {
				t.Errorf("%s checked: %s quarantined=%v traits known=%v, want dirty, not quarantined, traits known", dev.Name, d.State, d.Quarantined, d.traitsRead)
			}
			if err == nil {
				err = c.UnreserveSeen(ctx, d, nil)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	calls := c.Calls() - start
	t.Logf("Placement calls for %d released devices: %d", len(devs), calls)
	if want := uint64(3*len(devs) + 2); calls > want {
		t.Errorf("Placement calls = %d, want <= %d (per device: read 2, PUT 1; the group's checks: 1 or 2 listings)", calls, want)
	}
	for _, dev := range devs {
		if h.reserved(dev) != 0 {
			t.Errorf("%s still reserved", dev.Name)
		}
	}
}

// Safety rule 2 between the read and the shared check: a dirty device
// cannot be allocated at all (reserved == total leaves no capacity), and
// one that was un-reserved and allocated meanwhile has another generation,
// so the listing does not confirm the read and the device's own check
// sees the consumer.
func TestE2ESharedCheckSeesAllocationAfterRead(t *testing.T) {
	h, dev, c, d := releasedDevice(t)
	ctx := context.Background()
	code, body := h.call("PUT", "/allocations/"+newUUID(), map[string]any{
		"allocations": map[string]any{dev.UUID: map[string]any{"resources": map[string]int{"CUSTOM_PCI_144D_A80A": 1}}},
		"project_id":  "p-e2e", "user_id": "u-e2e", "consumer_generation": nil, "consumer_type": "INSTANCE",
	})
	if code != 409 {
		t.Fatalf("allocating a dirty device: HTTP %d %s, want 409 (no capacity)", code, body)
	}
	inst := newUUID()
	h.reallocate(inst, dev)
	got, err := c.ConfirmShared(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation == d.Generation || !slices.Contains(got.Consumers, inst) || got.State == StateDirty {
		t.Errorf("shared check after an allocation: generation %d -> %d, consumers %v, state %s; want a new generation, %s, not dirty",
			d.Generation, got.Generation, got.Consumers, got.State, inst)
	}
	if err := c.UnreserveSeen(ctx, got, nil); !errors.Is(err, ErrAllocated) {
		t.Errorf("UnreserveSeen of an allocated device: %v, want ErrAllocated", err)
	}
}

// A change that leaves the device dirty (here a trait of Nova's) moves its
// generation: the listing does not confirm the old read, the device is
// read afresh, and the un-reserve writes at the new generation.
func TestE2ESharedCheckAfterGenerationChange(t *testing.T) {
	h, dev, c, d := releasedDevice(t)
	ctx := context.Background()
	var cur struct {
		Gen    int      `json:"resource_provider_generation"`
		Traits []string `json:"traits"`
	}
	h.must("GET", "/resource_providers/"+dev.UUID+"/traits", nil, &cur, 200)
	h.must("PUT", "/resource_providers/"+dev.UUID+"/traits", map[string]any{
		"resource_provider_generation": cur.Gen, "traits": append(cur.Traits, "HW_GPU_API_VULKAN")}, nil, 200)
	got, err := c.ConfirmShared(ctx, d)
	if err != nil || got.State != StateDirty || got.Generation == d.Generation {
		t.Fatalf("shared check after a trait write: %s generation %d -> %d %v, want dirty at a new generation", got.State, d.Generation, got.Generation, err)
	}
	if err := c.UnreserveSeen(ctx, got, nil); err != nil {
		t.Fatal(err)
	}
	if h.reserved(dev) != 0 {
		t.Error("device not returned")
	}
}

// The quarantine trait, set between the read and the check or during the
// cleaning (after the check), keeps the device reserved: before the check
// the listing leaves it out and its own check sees the trait; after it,
// the trait write moved the generation and the guarded PUT fails with 409,
// and the re-read refuses.
func TestE2EQuarantineAroundSharedCheckKeepsDeviceReserved(t *testing.T) {
	for _, when := range []string{"before the check", "during the cleaning"} {
		t.Run(when, func(t *testing.T) {
			h, dev, c, d := releasedDevice(t)
			ctx := context.Background()
			if when == "before the check" {
				if err := c.Quarantine(ctx, dev, "test"); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.ConfirmShared(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if got.Quarantined != (when == "before the check") {
				t.Errorf("check: quarantined=%v", got.Quarantined)
			}
			if when == "during the cleaning" {
				if err := c.Quarantine(ctx, dev, "test"); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.UnreserveSeen(ctx, got, nil); !errors.Is(err, ErrQuarantined) {
				t.Errorf("UnreserveSeen of a quarantined device: %v, want ErrQuarantined", err)
			}
			if h.reserved(dev) != 1 {
				t.Error("quarantined device un-reserved")
			}
		})
	}
}

// An allocation written during the cleaning (after the shared check)
// makes the guarded PUT fail with 409; the re-read sees it.
func TestE2EAllocationAfterSharedCheckKeepsDeviceReserved(t *testing.T) {
	h, dev, c, d := releasedDevice(t)
	ctx := context.Background()
	d, err := c.ConfirmShared(ctx, d)
	if err != nil || d.State != StateDirty || !d.traitsRead {
		t.Fatalf("check = %v traits known=%v %v, want dirty with traits known", d.State, d.traitsRead, err)
	}
	h.reallocate(newUUID(), dev)
	writes := 0
	c.beforeInventoryWrite = func(context.Context, string) { writes++ }
	if err := c.UnreserveSeen(ctx, d, nil); !errors.Is(err, ErrAllocated) {
		t.Fatalf("UnreserveSeen after an allocation was written: %v, want ErrAllocated", err)
	}
	if writes != 1 {
		t.Errorf("inventory writes = %d, want 1 (the guarded PUT; the re-read must refuse without writing)", writes)
	}
	if h.reserved(dev) != 1 {
		t.Error("device un-reserved while allocated")
	}
}

// releasedDevice seeds a dirty device and reads it as a release does.
func releasedDevice(t *testing.T) (*seedHost, Ref, *Client, Device) {
	t.Helper()
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	c := newE2EClient(t, env, h.Node)
	d, err := c.ReadDevice(context.Background(), dev)
	if err != nil || d.State != StateDirty {
		t.Fatalf("ReadDevice = %v %v, want dirty", d.State, err)
	}
	return h, dev, c, d
}
