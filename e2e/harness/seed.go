package harness

import (
	"net/http"
	"strings"
	"testing"
)

// Standard traits Nova puts on a PCI device's resource provider.
const (
	TraitManagedPCIDevice = "COMPUTE_MANAGED_PCI_DEVICE"
	TraitOneTimeUse       = "HW_PCI_ONE_TIME_USE"
)

// Device is one PCI device as an operator lists it in Nova's [pci] device_spec.
type Device struct {
	Address       string   // PCI address, any case: "0000:af:00.0"
	VendorID      string   // hex, e.g. "8086"
	ProductID     string   // hex, e.g. "0a54"
	ResourceClass string   // device_spec resource_class; default CUSTOM_PCI_<VENDOR>_<PRODUCT>
	OneTimeUse    bool     // "one_time_use": true
	Traits        []string // device_spec traits (CUSTOM_ added when missing, as Nova does)
}

// ComputeNode is a seeded compute node provider and its device children.
type ComputeNode struct {
	Name    string
	UUID    string
	Devices []*DeviceRP
}

// DeviceRP is a device's resource provider as Nova names and fills it.
type DeviceRP struct {
	Device
	Name          string // "<node>_<ADDRESS upper-case>"
	UUID          string
	ResourceClass string // normalised, CUSTOM_...
}

// Device returns the child provider of the device at addr (any case).
func (n *ComputeNode) Device(addr string) *DeviceRP {
	for _, d := range n.Devices {
		if strings.EqualFold(d.Address, addr) {
			return d
		}
	}
	return nil
}

// Compute node inventory as nova-compute reports it for a small host.
var computeInventory = map[string]Inventory{
	"VCPU":      {Total: 16, Reserved: 0, MinUnit: 1, MaxUnit: 16, StepSize: 1, AllocationRatio: 4.0},
	"MEMORY_MB": {Total: 65536, Reserved: 512, MinUnit: 1, MaxUnit: 65536, StepSize: 1, AllocationRatio: 1.0},
	"DISK_GB":   {Total: 1000, Reserved: 0, MinUnit: 1, MaxUnit: 1000, StepSize: 1, AllocationRatio: 1.0},
}

// DeviceResourceClass is the resource class Nova gives d.
func DeviceResourceClass(d Device) string {
	if d.ResourceClass != "" {
		return normaliseCustom(d.ResourceClass)
	}
	return "CUSTOM_PCI_" + strings.ToUpper(d.VendorID) + "_" + strings.ToUpper(d.ProductID)
}

// DeviceProviderName is Nova's name for d's provider under node.
func DeviceProviderName(node string, d Device) string {
	return node + "_" + strings.ToUpper(d.Address)
}

// normaliseCustom follows os_resource_classes/os_traits normalize_name:
// upper case, non-alphanumerics to "_", CUSTOM_ prefix.
func normaliseCustom(name string) string {
	up := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, name)
	if strings.HasPrefix(up, "CUSTOM_") {
		return up
	}
	return "CUSTOM_" + up
}

// SeedComputeNode creates what nova-compute creates for a compute node named
// name with the given PCI devices ([pci] report_in_placement = True): the
// compute node provider with VCPU/MEMORY_MB/DISK_GB inventory, and per
// device a child provider "<name>_<ADDRESS>", its resource class, inventory
// total=1 with Nova's fields, and traits COMPUTE_MANAGED_PCI_DEVICE,
// HW_PCI_ONE_TIME_USE when one-time-use, plus the device's own.
func (p *Placement) SeedComputeNode(t testing.TB, name string, devs ...Device) *ComputeNode {
	t.Helper()
	node := &ComputeNode{Name: name, UUID: NewUUID()}
	p.call(t, http.MethodPost, "/resource_providers", Microversion,
		map[string]any{"name": name, "uuid": node.UUID}, nil, http.StatusOK)
	p.putInventories(t, node.UUID, computeInventory)
	for _, d := range devs {
		rp := &DeviceRP{Device: d, Name: DeviceProviderName(name, d), UUID: NewUUID(), ResourceClass: DeviceResourceClass(d)}
		p.call(t, http.MethodPost, "/resource_providers", Microversion,
			map[string]any{"name": rp.Name, "uuid": rp.UUID, "parent_provider_uuid": node.UUID}, nil, http.StatusOK)
		p.call(t, http.MethodPut, "/resource_classes/"+rp.ResourceClass, Microversion, nil, nil, http.StatusCreated, http.StatusNoContent)
		p.putInventories(t, rp.UUID, map[string]Inventory{
			rp.ResourceClass: {Total: 1, Reserved: 0, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1.0},
		})
		p.SetTraits(t, rp.UUID, p.novaTraits(t, d)...)
		node.Devices = append(node.Devices, rp)
	}
	return node
}

// novaTraits is the trait set Nova reports for d, plus extra:
// COMPUTE_MANAGED_PCI_DEVICE, HW_PCI_ONE_TIME_USE when one-time-use, and
// d's device_spec traits, normalised and created as Nova creates them.
func (p *Placement) novaTraits(t testing.TB, d Device, extra ...string) []string {
	t.Helper()
	traits := append([]string{TraitManagedPCIDevice}, extra...)
	if d.OneTimeUse {
		traits = append(traits, TraitOneTimeUse)
	}
	for _, tr := range d.Traits {
		tr = normaliseCustom(tr)
		p.call(t, http.MethodPut, "/traits/"+tr, Microversion, nil, nil, http.StatusCreated, http.StatusNoContent)
		traits = append(traits, tr)
	}
	return traits
}

func (p *Placement) putInventories(t testing.TB, rp string, inv map[string]Inventory) {
	t.Helper()
	body := map[string]any{"resource_provider_generation": p.generation(t, rp), "inventories": inv}
	p.call(t, http.MethodPut, "/resource_providers/"+rp+"/inventories", Microversion, body, nil)
}

// SetTraits replaces the traits of provider rp.
func (p *Placement) SetTraits(t testing.TB, rp string, traits ...string) {
	t.Helper()
	body := map[string]any{"resource_provider_generation": p.generation(t, rp), "traits": traits}
	p.call(t, http.MethodPut, "/resource_providers/"+rp+"/traits", Microversion, body, nil)
}
