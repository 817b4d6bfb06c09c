package placement

import (
	"fmt"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
)

// State is what Placement says about a one-time-use device.
type State string

const (
	StateAvailable   State = "available"     // reserved=0, no allocations
	StateInUse       State = "in-use"        // allocated, reserved < total (needs Burn)
	StateBurnedInUse State = "burned-in-use" // allocated, reserved=total
	StateDirty       State = "dirty"         // reserved=total, no allocations: clean it
	StateQuarantined State = "quarantined"   // not allocated, quarantine trait
	StateUnmanaged   State = "unmanaged"     // shape scour does not handle
)

// Ref identifies a device resource provider: the identity scour acts on.
type Ref struct {
	UUID    string
	Name    string           // "<node>_<ADDRESS>"
	Address hardware.Address // normalised from Name; "" when unparseable
}

func (r Ref) String() string {
	return fmt.Sprintf("%s (rp %s, pci %s)", r.Name, r.UUID, r.Address)
}

// logAttrs names the device in a log line, as slog key-value pairs.
func (r Ref) logAttrs() []any { return []any{"device", r.Name, "rp", r.UUID} }

// Inventory is the device's single inventory record.
type Inventory struct {
	ResourceClass   string
	Total           int
	Reserved        int
	MinUnit         int
	MaxUnit         int
	StepSize        int
	AllocationRatio float64
}

// Device is one OTU device as Placement sees it.
type Device struct {
	Ref
	Generation  int
	Inventory   Inventory
	Used        int      // sum of allocations of the resource class
	Consumers   []string // consumer (instance/migration) UUIDs holding it
	Quarantined bool
	// Cyborg: a Cyborg accelerator (placement.cyborg), which may have
	// total > 1 and is fenced and returned whole.
	Cyborg bool
	State  State
	// Why explains StateUnmanaged, or an odd but handled shape.
	Why string

	// What the reads at Generation returned, kept for Confirm and
	// UnreserveSeen (seen.go): raw is nil when the device was built from
	// a listing, traits are known only when traitsRead (all of them after
	// a traits read; after ConfirmShared's listing only the one-time-use
	// trait, and that the quarantine trait is absent: what UnreserveSeen
	// checks).
	raw        *rawInventory
	traits     []string
	traitsRead bool
	// readAt is when the read behind ReadDevice began (the client's
	// clock); zero for every other read, and once a check before a
	// destructive step used it (Gate.HasAllocations reuses it once).
	readAt time.Time
}

// parseAddress takes the PCI address from an RP name: the part after the
// LAST "_" (host names may contain "_"), any case.
func parseAddress(name string) (hardware.Address, error) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || i == len(name)-1 {
		return "", fmt.Errorf("resource provider name %q has no _<PCI address> suffix", name)
	}
	return hardware.ParseAddress(name[i+1:])
}

// deriveState applies the state table (docs/placement.md) to d.
// invCount is the number of inventories the RP has.
func deriveState(d *Device, invCount int) {
	switch {
	case d.Address == "":
		d.State, d.Why = StateUnmanaged, "name carries no PCI address"
		return
	case invCount != 1:
		d.State, d.Why = StateUnmanaged, fmt.Sprintf("%d inventories; scour handles exactly one", invCount)
		return
	case d.Inventory.Total < 1 || (d.Inventory.Total != 1 && !d.Cyborg):
		d.State, d.Why = StateUnmanaged, fmt.Sprintf("inventory total %d; scour handles total 1 (a PCI/PF device)", d.Inventory.Total)
		return
	}
	burned := d.Fenced()
	switch {
	case len(d.Consumers) > 0 && burned:
		d.State = StateBurnedInUse
	case len(d.Consumers) > 0:
		d.State = StateInUse
	case d.Quarantined:
		d.State = StateQuarantined
		if !burned {
			d.Why = "quarantine trait present but reserved < total: the device is schedulable; Quarantine again or investigate"
		}
	case burned:
		d.State = StateDirty
	default:
		d.State = StateAvailable
	}
}
