package handlers

import (
	"context"
	"slices"

	"github.com/scour-project/scour/placement"
)

// Gate is what the handlers need of this host's Placement gate
// (placement.Gate satisfies it): reads and the four writes, in
// Placement's own types. The gate decides what a device's state allows
// (placement.Dirty) and which of its errors are permanent
// (placement.IsPermanent); the handlers act on its answers.
type Gate interface {
	Scan(ctx context.Context) ([]placement.Device, error)
	InstanceDevices(ctx context.Context, instance string) (*placement.InstanceClaim, error)
	ReadDevice(ctx context.Context, dev placement.Ref) (placement.Device, error)
	Burn(ctx context.Context, dev placement.Ref) error
	Refence(ctx context.Context, dev placement.Ref) error
	Unreserve(ctx context.Context, dev placement.Ref, runID string) error
	Quarantine(ctx context.Context, dev placement.Ref, reason string) error
}

// OverGate gives the handlers their Placement over the host's gate.
func OverGate(g Gate) Placement { return overGate{g} }

type overGate struct{ g Gate }

// DeviceOf is the handlers' view of a device the gate read.
func DeviceOf(d placement.Device) Device {
	return Device{
		RPUUID: d.UUID, RPName: d.Name, Address: d.Address,
		ResourceClass: d.Inventory.ResourceClass,
		Total:         d.Inventory.Total, Reserved: d.Inventory.Reserved,
		Allocated:   d.InUse(),
		Consumers:   slices.Clone(d.Consumers),
		Quarantined: d.Quarantined,
		Cyborg:      d.Cyborg,
		State:       d.State,
	}
}

// Ref names the device to the gate.
func (d Device) Ref() placement.Ref {
	return placement.Ref{UUID: d.RPUUID, Name: d.RPName, Address: d.Address}
}

func (o overGate) ScanHost(ctx context.Context) ([]Device, error) {
	devs, err := o.g.Scan(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		out = append(out, DeviceOf(d))
	}
	return out, nil
}

func (o overGate) InstanceAllocations(ctx context.Context, instance string) (InstanceAllocation, error) {
	ic, err := o.g.InstanceDevices(ctx, instance)
	if err != nil {
		return InstanceAllocation{}, err
	}
	out := InstanceAllocation{
		VCPU: ic.Compute["VCPU"], MemoryMB: ic.Compute["MEMORY_MB"], DiskGB: ic.Compute["DISK_GB"],
		ProjectID: ic.ProjectID, UserID: ic.UserID, ConsumerType: ic.ConsumerType,
	}
	for _, d := range ic.Devices {
		out.Devices = append(out.Devices, DeviceOf(d))
	}
	return out, nil
}

func (o overGate) ReadDevice(ctx context.Context, d Device) (Device, error) {
	read, err := o.g.ReadDevice(ctx, d.Ref())
	if err != nil {
		return d, err
	}
	return DeviceOf(read), nil
}

func (o overGate) Burn(ctx context.Context, d Device) error    { return o.g.Burn(ctx, d.Ref()) }
func (o overGate) Refence(ctx context.Context, d Device) error { return o.g.Refence(ctx, d.Ref()) }

func (o overGate) Unreserve(ctx context.Context, d Device, runID string) error {
	return o.g.Unreserve(ctx, d.Ref(), runID)
}

func (o overGate) Quarantine(ctx context.Context, d Device, reason string) error {
	return o.g.Quarantine(ctx, d.Ref(), reason)
}
