package claims

import (
	"context"
	"errors"
	"time"
)

// ClaimState is where a claim stands; see the diagram in doc.go.
type ClaimState string

const (
	ClaimActive   ClaimState = "active"
	ClaimDormant  ClaimState = "dormant" // instance shelved offloaded
	ClaimReleased ClaimState = "released"
	ClaimOrphaned ClaimState = "orphaned" // released by the sweep
)

// PCIDevice is one device a claim holds, as recorded in the claim's pci JSON.
type PCIDevice struct {
	RPUUID        string `json:"rp_uuid"`
	RPName        string `json:"rp_name,omitempty"`
	Address       string `json:"address,omitempty"`
	ResourceClass string `json:"resource_class,omitempty"`
}

// Volume is one volume attached to the claiming instance.
type Volume struct {
	ID     string `json:"id"`
	Device string `json:"device,omitempty"`
	IsRoot bool   `json:"is_root,omitempty"`
}

// Volumes is what UpdateVolumes lets a handler change, in one transaction.
type Volumes struct {
	Attached     []Volume
	RootDetached bool
}

// Claim is one instance's claim on this host's one-time-use devices. A
// same-host resize has two claims: the source (ResizeTarget false) and the
// target (ResizeTarget true).
type Claim struct {
	ID           string
	Host         string
	Node         string
	InstanceUUID string
	ProjectID    string
	UserID       string
	VCPUs        int
	MemoryMB     int
	DiskGB       int
	PCI          []PCIDevice
	ResizeTarget bool
	State        ClaimState
	Volumes      Volumes
	// MessageID is the notification that created the claim; LastMessageID
	// the one behind its latest transition.
	MessageID     string
	LastMessageID string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	DormantAt     *time.Time
	ReactivatedAt *time.Time
	ReleasedAt    *time.Time
	// ReleaseReason says why the claim ended ("instance.delete.end",
	// "orphan sweep: no allocation in Placement", ...).
	ReleaseReason string
}

// Live reports whether the claim still holds its devices' history open
// (active or dormant).
func (c Claim) Live() bool { return c.State == ClaimActive || c.State == ClaimDormant }

// HasDevice reports whether the claim includes the device resource provider.
func (c Claim) HasDevice(rpUUID string) bool {
	for _, d := range c.PCI {
		if d.RPUUID == rpUUID {
			return true
		}
	}
	return false
}

// AllocationCheck answers whether Placement shows an allocation for the
// instance (consumer) on this host. The orphan sweep calls it outside any
// transaction.
type AllocationCheck func(ctx context.Context, instanceUUID string) (bool, error)

// Errors callers can test with errors.Is.
var (
	ErrNoClaim      = errors.New("no live claim")
	ErrInvalidClaim = errors.New("invalid claim")
)
