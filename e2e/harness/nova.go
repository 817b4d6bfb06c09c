package harness

import (
	"net/http"
	"testing"
)

// Flavor resources AllocateInstance puts on the compute node provider.
var instanceResources = map[string]int{"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}

func nodeAllocations(node *ComputeNode, devs []*DeviceRP) map[string]any {
	allocs := map[string]any{node.UUID: map[string]any{"resources": instanceResources}}
	for _, d := range devs {
		allocs[d.UUID] = map[string]any{"resources": map[string]int{d.ResourceClass: 1}}
	}
	return allocs
}

// AllocateInstance claims resources for an instance on node as the
// scheduler does (PUT /allocations/{instance} at 1.39 with consumer_type
// INSTANCE): VCPU/MEMORY_MB/DISK_GB on the compute node plus one unit of
// each device. Nova then burns one-time-use devices: call Burn.
func (p *Placement) AllocateInstance(t testing.TB, instance, project, user string, node *ComputeNode, devs ...*DeviceRP) {
	t.Helper()
	body := map[string]any{
		"allocations":         nodeAllocations(node, devs),
		"consumer_generation": nil,
		"project_id":          project,
		"user_id":             user,
		"consumer_type":       "INSTANCE",
	}
	p.call(t, http.MethodPut, "/allocations/"+instance, Microversion, body, nil, http.StatusNoContent)
}

// Burn sets reserved = total on the device's inventory, keeping every other
// field, at microversion 1.26 as nova-compute does when it claims a
// one-time-use device.
//
// Like nova-compute's report client it re-reads and retries on a
// generation conflict (409): scour's reconciler may burn the same device
// between Nova's allocation and Nova's burn, which is harmless.
func (p *Placement) Burn(t testing.TB, dev *DeviceRP) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		inv, gen := p.Inventories(t, dev.UUID)
		i, ok := inv[dev.ResourceClass]
		if !ok {
			t.Fatalf("e2e harness: burning %s: no %s inventory", dev.Name, dev.ResourceClass)
		}
		if i.Reserved == i.Total {
			return // already burned (by scour's reconciler)
		}
		body := map[string]any{
			"resource_provider_generation": gen,
			"total":                        i.Total,
			"reserved":                     i.Total,
			"min_unit":                     i.MinUnit,
			"max_unit":                     i.MaxUnit,
			"step_size":                    i.StepSize,
			"allocation_ratio":             i.AllocationRatio,
		}
		status := p.call(t, http.MethodPut, "/resource_providers/"+dev.UUID+"/inventories/"+dev.ResourceClass, "1.26", body, nil,
			http.StatusOK, http.StatusConflict)
		if status == http.StatusOK {
			return
		}
		if attempt == 5 {
			t.Fatalf("e2e harness: burning %s: still a generation conflict after %d attempts", dev.Name, attempt)
		}
	}
}

// MoveAllocations does what Nova does when a migration starts (resize, cold
// or live migration): in one POST /allocations the instance's current
// allocations move to a new migration consumer (the source side, held until
// confirm or revert) and the instance gets resources on dest. It returns the
// migration UUID. Confirm = DeleteAllocations(migration); revert = Nova
// moving the migration's allocations back, see RevertMove.
//
// Placement refuses (409) to give the migration consumer an allocation on a
// device that is already burned (reserved == total leaves no capacity), so a
// move of an instance whose source device is burned fails here as it would
// for Nova against Placement 8.0.0.
func (p *Placement) MoveAllocations(t testing.TB, instance string, dest *ComputeNode, destDevs ...*DeviceRP) string {
	t.Helper()
	var cur consumerAllocs
	p.call(t, http.MethodGet, "/allocations/"+instance, Microversion, nil, &cur)
	if len(cur.Allocations) == 0 {
		t.Fatalf("e2e harness: moving instance %s: it holds no allocations", instance)
	}
	migration := NewUUID()
	body := map[string]any{
		migration: map[string]any{
			"allocations":         cur.Allocations,
			"consumer_generation": nil,
			"project_id":          cur.ProjectID,
			"user_id":             cur.UserID,
			"consumer_type":       "MIGRATION",
		},
		instance: map[string]any{
			"allocations":         nodeAllocations(dest, destDevs),
			"consumer_generation": cur.ConsumerGeneration,
			"project_id":          cur.ProjectID,
			"user_id":             cur.UserID,
			"consumer_type":       "INSTANCE",
		},
	}
	p.call(t, http.MethodPost, "/allocations", Microversion, body, nil, http.StatusNoContent)
	return migration
}

// RevertMove gives the instance back the allocations its migration consumer
// holds and empties the migration, as Nova's resize revert does.
func (p *Placement) RevertMove(t testing.TB, instance, migration string) {
	t.Helper()
	var mig, inst consumerAllocs
	p.call(t, http.MethodGet, "/allocations/"+migration, Microversion, nil, &mig)
	p.call(t, http.MethodGet, "/allocations/"+instance, Microversion, nil, &inst)
	body := map[string]any{
		instance: map[string]any{
			"allocations":         mig.Allocations,
			"consumer_generation": inst.ConsumerGeneration,
			"project_id":          mig.ProjectID,
			"user_id":             mig.UserID,
			"consumer_type":       "INSTANCE",
		},
		migration: map[string]any{
			"allocations":         map[string]any{},
			"consumer_generation": mig.ConsumerGeneration,
			"project_id":          mig.ProjectID,
			"user_id":             mig.UserID,
			"consumer_type":       "MIGRATION",
		},
	}
	p.call(t, http.MethodPost, "/allocations", Microversion, body, nil, http.StatusNoContent)
}

// DeleteAllocations removes every allocation of consumer, as Nova does when
// an instance is deleted or a migration confirmed. A consumer without
// allocations is fine.
func (p *Placement) DeleteAllocations(t testing.TB, consumer string) {
	t.Helper()
	p.call(t, http.MethodDelete, "/allocations/"+consumer, Microversion, nil, nil, http.StatusNoContent, http.StatusNotFound)
}

// TraitOwnerNova is the standard trait Nova adds to every provider it
// manages (os-traits OWNER_NOVA).
const TraitOwnerNova = "OWNER_NOVA"

// NovaUpdateTraits plays nova-compute pushing its provider tree after a
// refresh of its cache ([pci] report_in_placement): the PCI-in-Placement
// translator sets the device provider's traits to exactly Nova's set
// (update_traits, then OWNER_NOVA; nova/compute/pci_placement_translator.py):
// COMPUTE_MANAGED_PCI_DEVICE, HW_PCI_ONE_TIME_USE when one-time-use, and
// the traits of the device's [pci] device_spec entry (dev.Traits,
// normalised and created as Nova does). Every other trait goes: scour's
// quarantine trait, traits another agent wrote. Inventory is left alone
// (reserved included).
func (p *Placement) NovaUpdateTraits(t testing.TB, dev *DeviceRP) {
	t.Helper()
	p.SetTraits(t, dev.UUID, p.novaTraits(t, dev.Device, TraitOwnerNova)...)
}

// RecreateDevice plays Nova re-creating the provider of dev, a device of
// node, with a new UUID at the same PCI address (a restored or rebuilt
// Placement database, a compute node deleted and registered again): the
// provider is deleted (DELETE /resource_providers/{uuid}: Placement
// refuses with 409 while it has allocations or child providers; a
// device's provider has no children) and created again under node with
// the same name, the inventory Nova's PCI-in-Placement translator reports
// (total and max_unit only: Placement defaults reserved to 0) and Nova's
// traits (COMPUTE_MANAGED_PCI_DEVICE, HW_PCI_ONE_TIME_USE when
// one-time-use, dev's own, OWNER_NOVA), none of scour's. dev.UUID becomes
// the new provider's; the old UUID is returned.
func (p *Placement) RecreateDevice(t testing.TB, node *ComputeNode, dev *DeviceRP) (old string) {
	t.Helper()
	old = dev.UUID
	p.call(t, http.MethodDelete, "/resource_providers/"+old, Microversion, nil, nil, http.StatusNoContent)
	dev.UUID = NewUUID()
	p.call(t, http.MethodPost, "/resource_providers", Microversion,
		map[string]any{"name": dev.Name, "uuid": dev.UUID, "parent_provider_uuid": node.UUID}, nil, http.StatusOK)
	body := map[string]any{"resource_provider_generation": p.generation(t, dev.UUID), "inventories": map[string]any{
		dev.ResourceClass: map[string]int{"total": 1, "max_unit": 1},
	}}
	p.call(t, http.MethodPut, "/resource_providers/"+dev.UUID+"/inventories", Microversion, body, nil)
	p.SetTraits(t, dev.UUID, p.novaTraits(t, dev.Device, TraitOwnerNova)...)
	return old
}
