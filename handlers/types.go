package handlers

import (
	"context"
	"github.com/scour-project/scour/pipeline"
	"slices"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/placement"
)

// Device is one one-time-use device of THIS host's Placement tree (safety
// rule 3: identity never comes from a notification), as the handlers act
// on it. It differs from placement.Device (DeviceOf converts) in what it
// leaves out: no generation and no record of which reads it came from,
// which only the gate may use to shorten a check or an un-reserve, so a
// device the handlers built or kept can never stand for a fresh read.
type Device struct {
	RPUUID        string
	RPName        string
	Address       hardware.Address
	ResourceClass string
	Total         int
	Reserved      int
	// Allocated is true when Placement shows any allocation (usage > 0)
	// on the device, whether or not Consumers could be listed.
	Allocated   bool
	Consumers   []string
	Quarantined bool
	// Cyborg: an accelerator Cyborg reports (docs/cyborg.md), fenced
	// whole (reserved = total) while it holds a tenant's data.
	Cyborg bool
	// State is what the gate derived (placement.State). The handlers
	// re-derive what they act on from the raw fields above and use State
	// only to honour StateUnmanaged, so a State got wrong cannot make
	// scour clean an allocated device.
	State placement.State
}

// InUse reports whether Placement shows an allocation on the device.
func (d Device) InUse() bool { return d.Allocated || len(d.Consumers) > 0 }

// HeldBy reports whether consumer holds an allocation on the device.
func (d Device) HeldBy(consumer string) bool { return slices.Contains(d.Consumers, consumer) }

// Dirty reports a device that needs cleaning: of a shape scour manages,
// and dirty by placement.Dirty (the one dirty predicate).
func (d Device) Dirty() bool {
	return d.State != placement.StateUnmanaged && placement.Dirty(d.Total, d.Reserved, d.InUse(), d.Quarantined)
}

// Fenced reports reserved = total (placement.FullyReserved).
func (d Device) Fenced() bool { return placement.FullyReserved(d.Total, d.Reserved) }

// NeedsBurn reports an allocated device that Nova left below reserved=total
// (Nova before 2025.2, or a device flagged one-time-use late).
func (d Device) NeedsBurn() bool {
	return d.State != placement.StateUnmanaged && d.InUse() && d.Total > 0 && !d.Fenced()
}

// InstanceAllocation is what GET /allocations/{instance} says about one
// instance, restricted to this host's tree: its one-time-use devices and
// the compute node resources recorded in the claim. A device whose Total
// is 0 (inventory not read) is burned anyway: Burn is idempotent.
// ProjectID/UserID, when Placement has them (1.38+), win over the
// command's.
type InstanceAllocation struct {
	Devices   []Device
	VCPU      int
	MemoryMB  int
	DiskGB    int
	ProjectID string
	UserID    string
	// ConsumerType is Placement's consumer_type (1.38+): "INSTANCE",
	// "MIGRATION", or "" when Placement does not say.
	ConsumerType string
	// ReadAt is when the read began, when the caller noted it (zero:
	// unknown).
	ReadAt time.Time
}

// Placement is the subset of the Placement gate the handlers use.
type Placement interface {
	// ScanHost lists this host's one-time-use devices with their state.
	ScanHost(ctx context.Context) ([]Device, error)
	// InstanceAllocations reads one instance's allocations; devices are
	// those of this host's tree that carry the one-time-use trait.
	InstanceAllocations(ctx context.Context, instance string) (InstanceAllocation, error)
	// ReadDevice reads one device of this host's tree afresh (d names it:
	// RPUUID, RPName, Address). It wraps placement.ErrNotFound when the device is no
	// longer in the tree.
	ReadDevice(ctx context.Context, d Device) (Device, error)
	// Burn sets reserved=total on an allocated device. Idempotent. It
	// wraps placement.ErrNotAllocated when nobody holds the device any more.
	Burn(ctx context.Context, d Device) error
	// Unreserve returns the device cleaned by run runID to the pool. The
	// gate re-reads the inventory and refuses (wrapping placement.ErrAllocated) when
	// an allocation exists: safety rule 2's second check. It journals
	// each PUT with the run before sending it, and refuses (wrapping
	// placement.ErrStaleReturn) when an earlier PUT of the run may have landed and
	// the device changed since.
	Unreserve(ctx context.Context, d Device, runID string) error
	// Refence sets reserved=total again on an unallocated device whose
	// fence someone lifted (Cyborg's device enable, an inventory rewrite,
	// a provider re-created) while it still holds a tenant's data.
	Refence(ctx context.Context, d Device) error
	// Quarantine adds the quarantine trait and keeps the device reserved.
	Quarantine(ctx context.Context, d Device, reason string) error
}

// Hardware answers whether a PCI function exists on this host.
type Hardware interface {
	Present(ctx context.Context, addr hardware.Address) (bool, error)
}

// ClaimState is a claim's lifecycle state.
type ClaimState string

const (
	ClaimActive   ClaimState = "active"
	ClaimDormant  ClaimState = "dormant" // shelved offloaded; kept for unshelve
	ClaimReleased ClaimState = "released"
	ClaimOrphaned ClaimState = "orphaned" // swept: no allocation backs it
)

// Volume is one volume attached to the claiming instance.
type Volume struct {
	ID     string
	IsRoot bool
}

// Volumes is what scour knows of an instance's volumes. RootDetached means
// the boot volume was detached (instance stopped or shelved offloaded):
// the instance has "no root volume" until an is_root attach.
type Volumes struct {
	Attached     []Volume
	RootDetached bool
}

// ClaimDevice is one device a claim holds.
type ClaimDevice struct {
	RPUUID        string
	RPName        string
	Address       hardware.Address
	ResourceClass string
}

// Claim records that an instance holds (or held) devices of this host: one
// claim per instance, plus a second one (ResizeTarget) for the new side of
// a same-host resize.
type Claim struct {
	ID           string // assigned by the store
	Host, Node   string
	InstanceUUID string
	ProjectID    string
	UserID       string
	VCPU         int
	MemoryMB     int
	DiskGB       int
	Devices      []ClaimDevice
	ResizeTarget bool
	State        ClaimState
	Volumes      Volumes
	MessageID    string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Live reports an active or dormant claim.
func (c Claim) Live() bool { return c.State == ClaimActive || c.State == ClaimDormant }

// HasDevice reports whether the claim holds the device.
func (c Claim) HasDevice(rp string) bool {
	return slices.ContainsFunc(c.Devices, func(d ClaimDevice) bool { return d.RPUUID == rp })
}

// Claims is the subset of the claims store the handlers use. Every method
// is scoped to this host; every transition is idempotent.
type Claims interface {
	// RecordClaim stores c as active, idempotently by (instance, device,
	// ResizeTarget): a live claim with the same ResizeTarget gains the
	// devices it lacks; a replay changes nothing.
	RecordClaim(ctx context.Context, c Claim) error
	// ClaimsForInstance returns the instance's claims in every state.
	ClaimsForInstance(ctx context.Context, instance string) ([]Claim, error)
	// ReleaseClaim releases the instance's live claim(s) with the given
	// ResizeTarget.
	ReleaseClaim(ctx context.Context, instance string, resizeTarget bool, reason, messageID string) error
	// MarkDormant makes the instance's active claims dormant.
	MarkDormant(ctx context.Context, instance, messageID string) error
	// Reactivate makes the instance's dormant claims active again.
	Reactivate(ctx context.Context, instance, messageID string) error
	// UpdateVolumes applies fn, in one transaction, to the volumes of the
	// instance's live claims. No live claim: no-op.
	UpdateVolumes(ctx context.Context, instance string, fn func(*Volumes)) error
	// LiveClaims returns the active and dormant claims.
	LiveClaims(ctx context.Context) ([]Claim, error)
	// SweepOrphans marks orphaned the active claims older than
	// claim_expiry_time (the store's setting) whose instance backed says
	// false for. Dormant claims are never orphans. It returns how many.
	SweepOrphans(ctx context.Context, backed func(ctx context.Context, instance string) (bool, error)) (int, error)
	// SawHolder records that Placement showed consumer holding the device
	// (scans and burns); the last one seen may be the previous tenant.
	SawHolder(ctx context.Context, rpUUID, consumer string) error
	// SawHolderAt is SawHolder for a Placement read that began at at: the
	// consumer is dated by that read, not by the write (the store keeps
	// the earlier of the two).
	SawHolderAt(ctx context.Context, rpUUID, consumer string, at time.Time) error
	// PreviousTenant names the last consumer known to hold the device:
	// the newer of the last holder seen and the newest claim (for the
	// cleaning record and the plugins). ok false: unknown.
	// The device is every provider SawAddress saw at its address: what
	// was known under a provider Nova re-created follows the device.
	PreviousTenant(ctx context.Context, rpUUID string) (t Tenant, ok bool, err error)
	// SawAddress records the PCI address at which this host's Placement
	// tree shows the device's provider (rule 3: never a notification's).
	SawAddress(ctx context.Context, rpUUID string, addr hardware.Address) error
	// NoteDeleted remembers, durably, that this host handled the delete
	// of instance (a tombstone; idempotent). Deleted says whether it did.
	// A claim command of the instance handled alongside the delete or
	// after it records no claim (deleted.go).
	NoteDeleted(ctx context.Context, instance, messageID string) error
	Deleted(ctx context.Context, instance string) (bool, error)
}

// QuarantineLister is an optional Claims capability: the store's open
// quarantines of this host (verdicts and operator retirements), by RP
// UUID. The store is their authority; every scan puts a device that
// Placement does not show reserved and quarantined back that way (rule 4),
// so a Placement write that failed (a retire while Placement was down) is
// repeated until it lands.
type QuarantineLister interface {
	OpenQuarantines(ctx context.Context) (map[string]OpenQuarantine, error)
	// ReattachQuarantine moves from's open quarantine to to, the
	// re-created provider the tree shows at its address addr (from is
	// no longer in the tree). moved is false when from had none open.
	ReattachQuarantine(ctx context.Context, from, to string, addr hardware.Address) (moved bool, err error)
}

// OpenQuarantine is one open quarantine of the store. Both kinds keep the
// device reserved with the quarantine trait; the devices gauge tells them
// apart, because only a cleaning verdict needs a human now.
type OpenQuarantine struct {
	Reason string
	// Retired: an operator's retirement (scourctl retire, e.g. for an
	// RMA), planned; otherwise a cleaning run's quarantine verdict.
	Retired bool
	// Wipe: the retirement waits for its retirement run (the device was
	// not cleaned since its last tenant: the wipe, or the record of
	// --no-wipe). The reconciler queues the device like a dirty one once
	// nothing holds it, and the Cleaner runs that instead of the pipeline.
	Wipe bool
	// Address is the device's PCI address ("" unknown): a provider at
	// it that replaced this one in the tree is the same device.
	Address hardware.Address
}

// RetirementWiper is an optional Claims capability (claims.Store's
// WipeRetirementIfUsed): an operator's retirement decided its wipe from
// reads made before the retirement fenced the device, and Nova may have
// allocated the device meanwhile. Asked about a device whose retirement
// waits for no wipe, it makes that retirement wait for its retirement
// wipe when a tenant is known to have held the device since (since the
// retirement, or its last retirement run, and the device's last clean),
// and returns that tenant; changed is false when nothing changed.
type RetirementWiper interface {
	WipeRetirementIfUsed(ctx context.Context, rp string) (t Tenant, changed bool, err error)
}

// Tenant is who used a device before its cleaning.
type Tenant struct {
	Instance string
	Project  string
	// DeviceRP is the provider under which the store knew the tenant:
	// another than the device's own when its provider was re-created.
	DeviceRP string
}

// Verdicts lists every verdict, for metrics.
var Verdicts = []pipeline.Verdict{pipeline.VerdictClean, pipeline.VerdictRetryLater, pipeline.VerdictQuarantine, pipeline.VerdictAborted, pipeline.VerdictNoProfile}

// CleanRequest asks the cleaner to run (or resume) the device's pipeline.
type CleanRequest struct {
	Device           Device
	PreviousInstance string // "" when the device was found dirty without a claim
	PreviousProject  string
	Trigger          string // what made the reconciler look: start, interval, release, ...
}

// CleanResult is a finished run. Detail is the operator-facing reason for
// anything but clean.
type CleanResult struct {
	Verdict pipeline.Verdict
	RunID   string
	Detail  string
}

// Cleaner runs a device's pipeline. It checks Placement for allocations
// immediately before its first destructive step (safety rule 2), persists
// every step and the record before returning clean (rule 1), and resumes
// an open run from its checkpoint (rule 5). A returned error is treated as
// retry-later.
type Cleaner interface {
	Clean(ctx context.Context, req CleanRequest) (CleanResult, error)
}

// ReturnRecorder is an optional Cleaner capability. A clean verdict's
// record says "cleaned"; told once the device was un-reserved, the
// recorder makes it "returned". Told why the un-reserve did not happen, it
// notes it: final (the device got quarantined or retired meanwhile)
// closes the record as cleaned and not returned; otherwise the record
// stays open and the next clean of the device resumes it and retries the
// un-reserve. RecordUsedAfterClean closes the record as a final
// RecordNotReturned does, for a run whose device may have served a tenant
// after its clean that the store never recorded (a stale return, a
// re-fence while it ran, an allocation at the un-reserve, an un-reserve
// by someone else): its clean then leaves an unknown tenant held
// (PreviousTenant names it, or a tenant seen since the run began), so a
// scan that finds the device un-fenced before a later run cleaned it
// fences it again.
// UsedSinceStarted, asked before the un-reserve, says who the store saw
// holding the device after the run started ("" nobody): then the run's
// clean does not cover that tenant's data, and the device is not returned.
type ReturnRecorder interface {
	RecordReturned(ctx context.Context, runID string, d Device) error
	RecordNotReturned(ctx context.Context, runID string, d Device, why string, final bool) error
	RecordUsedAfterClean(ctx context.Context, runID string, d Device, why string) error
	UsedSinceStarted(ctx context.Context, runID string) (why string, err error)
}

// QuarantineRecorder is an optional Cleaner capability: told once the
// quarantine trait is on the device, it closes the record as "quarantined".
type QuarantineRecorder interface {
	RecordQuarantined(ctx context.Context, runID string, d Device, reason string) error
}
