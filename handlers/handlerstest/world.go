package handlerstest

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/placement"
	"slices"
	"sync"

	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
)

// World is an in-memory Placement tree of one host. It implements
// handlers.Placement with the gate's rules: Unreserve refuses (wrapping
// placement.ErrAllocated) while the device is allocated.
type World struct {
	mu     sync.Mutex
	devs   map[string]*handlers.Device
	order  []string
	res    map[string][3]int // instance → VCPU, MEMORY_MB, DISK_GB
	ctype  map[string]string // consumer → consumer_type (INSTANCE, MIGRATION)
	counts map[string]int    // "op/rp" → calls
}

// NewWorld returns an empty tree.
func NewWorld() *World {
	return &World{devs: map[string]*handlers.Device{}, res: map[string][3]int{}, ctype: map[string]string{}, counts: map[string]int{}}
}

// AddDevice adds an available device (total 1, reserved 0) whose RP UUID
// is rp and whose PCI address is addr.
func (w *World) AddDevice(rp string, addr hardware.Address) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.devs[rp] = &handlers.Device{RPUUID: rp, RPName: "compute1_" + addr.Upper(), Address: addr,
		ResourceClass: "CUSTOM_OTU", Total: 1}
	w.order = append(w.order, rp)
}

// Set edits a device in place (any starting state a test needs).
func (w *World) Set(rp string, fn func(*handlers.Device)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn(w.devs[rp])
}

// Allocate gives rps to consumer; burn sets reserved=total as Nova 2025.2
// does when it claims a one-time-use device.
func (w *World) Allocate(consumer string, burn bool, rps ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rp := range rps {
		d := w.devs[rp]
		d.Consumers = append(d.Consumers, consumer)
		if burn {
			d.Reserved = d.Total
		}
	}
	w.res[consumer] = [3]int{4, 8192, 20}
	w.ctype[consumer] = "INSTANCE"
}

// Free removes every allocation of consumer (Nova deleting the instance).
func (w *World) Free(consumer string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.devs {
		d.Consumers = slices.DeleteFunc(d.Consumers, func(c string) bool { return c == consumer })
	}
}

// Move hands consumer's allocation on rp to another consumer (Nova moving
// the source allocation to the migration record, of consumer_type
// MIGRATION).
func (w *World) Move(from, to, rp string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctype[to] = "MIGRATION"
	d := w.devs[rp]
	for i, c := range d.Consumers {
		if c == from {
			d.Consumers[i] = to
		}
	}
}

// Device returns a snapshot of rp.
func (w *World) Device(rp string) handlers.Device {
	w.mu.Lock()
	defer w.mu.Unlock()
	return snapshot(w.devs[rp])
}

// Count returns how often op ("scan", "read", "burn", "unreserve", "quarantine")
// was called, for rp ("" for scans).
func (w *World) Count(op, rp string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[op+"/"+rp]
}

func snapshot(d *handlers.Device) handlers.Device {
	s := *d
	s.Consumers = slices.Clone(d.Consumers)
	s.State = state(s)
	return s
}

func state(d handlers.Device) placement.State {
	switch {
	case d.Total != 1 && !d.Cyborg: // a Cyborg device may have more units (placement.deriveState)
		return placement.StateUnmanaged
	case d.InUse() && d.Fenced():
		return placement.StateBurnedInUse
	case d.InUse():
		return placement.StateInUse
	case placement.QuarantineHeld(d.Total, d.Reserved, d.Quarantined):
		return placement.StateQuarantined
	case d.Fenced():
		return placement.StateDirty
	}
	return placement.StateAvailable
}

// ScanHost implements handlers.Placement.
func (w *World) ScanHost(ctx context.Context) ([]handlers.Device, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts["scan/"]++
	out := make([]handlers.Device, 0, len(w.order))
	for _, rp := range w.order {
		out = append(out, snapshot(w.devs[rp]))
	}
	return out, nil
}

// InstanceAllocations implements handlers.Placement.
func (w *World) InstanceAllocations(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var a handlers.InstanceAllocation
	for _, rp := range w.order {
		if d := w.devs[rp]; d.HeldBy(instance) {
			a.Devices = append(a.Devices, snapshot(d))
		}
	}
	if len(a.Devices) > 0 {
		r := w.res[instance]
		a.VCPU, a.MemoryMB, a.DiskGB = r[0], r[1], r[2]
		a.ConsumerType = w.ctype[instance]
	}
	return a, nil
}

// ReadDevice implements handlers.Placement: one device afresh.
func (w *World) ReadDevice(ctx context.Context, d handlers.Device) (handlers.Device, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts["read/"+d.RPUUID]++
	dev, ok := w.devs[d.RPUUID]
	if !ok {
		return d, fmt.Errorf("device %s: %w", d.RPName, placement.ErrNotFound)
	}
	return snapshot(dev), nil
}

// Burn implements handlers.Placement.
func (w *World) Burn(ctx context.Context, d handlers.Device) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts["burn/"+d.RPUUID]++
	dev := w.devs[d.RPUUID]
	dev.Reserved = dev.Total
	return nil
}

// Refence implements handlers.Placement: reserved=total.
func (w *World) Refence(ctx context.Context, d handlers.Device) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts["refence/"+d.RPUUID]++
	dev := w.devs[d.RPUUID]
	dev.Reserved = dev.Total
	return nil
}

// Unreserve implements handlers.Placement: re-check, then reserved=0.
func (w *World) Unreserve(ctx context.Context, d handlers.Device) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	dev := w.devs[d.RPUUID]
	if dev.InUse() {
		return fmt.Errorf("un-reserve %s: %w by %v", d.RPName, placement.ErrAllocated, dev.Consumers)
	}
	w.counts["unreserve/"+d.RPUUID]++
	dev.Reserved = max(0, dev.Reserved-dev.Total)
	return nil
}

// Quarantine implements handlers.Placement as the real gate does:
// reserved=total (whatever the allocations), then the trait.
func (w *World) Quarantine(ctx context.Context, d handlers.Device, reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts["quarantine/"+d.RPUUID]++
	dev := w.devs[d.RPUUID]
	dev.Reserved = max(dev.Reserved, dev.Total)
	dev.Quarantined = true
	return nil
}

// Remove deletes rp's provider from the tree, as Nova does when the
// device leaves [pci] device_spec (e.g. pulled for an RMA).
func (w *World) Remove(rp string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.devs, rp)
	w.order = slices.DeleteFunc(w.order, func(r string) bool { return r == rp })
}

// Recreate replaces rp's provider by a new one of uuid newRP for the same
// PCI address, as Nova does when it creates the device's provider again
// (a rebuilt Placement database, a compute node re-registered): a new
// UUID, Placement's inventory defaults (reserved 0), Nova's traits only.
func (w *World) Recreate(rp, newRP string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.devs[rp]
	delete(w.devs, rp)
	w.devs[newRP] = &handlers.Device{RPUUID: newRP, RPName: old.RPName, Address: old.Address,
		ResourceClass: old.ResourceClass, Total: old.Total}
	for i, r := range w.order {
		if r == rp {
			w.order[i] = newRP
		}
	}
}
