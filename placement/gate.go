package placement

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// Gate is this host's Placement gate: the one place that decides what
// Placement's state of a device allows (safety rule 2, docs/lifecycle.md).
// It owns
//
//   - the predicates on a device's state (Dirty, Retirable,
//     QuarantineHeld, FullyReserved), written once here;
//   - the devices' latest reads (seen), shared by the handlers' reads and
//     the pipeline's check before its first destructive step, re-proved by
//     generation before any use (seen.go);
//   - the choice between UnreserveSeen (one PUT at the generation the
//     check saw) and Unreserve (re-read, re-verify, write);
//   - which of its errors retrying cannot fix (IsPermanent).
//
// It satisfies the handlers' Placement and the pipeline's
// AllocationChecker and RetiredChecker directly: those packages declare
// what they need, in this package's types.
type Gate struct {
	c *Client
	// journal returns run runID's un-reserve PUT journal (the claims
	// store); nil keeps each call's journal in memory.
	journal func(runID string) PutJournal

	mu   sync.Mutex
	seen map[string]Device
	// checked is, by device, the generation of the read behind the last
	// check before a destructive step (CheckedGeneration).
	checked map[string]int
}

// NewGate returns the gate over c; journal gives each run's PutJournal.
func NewGate(c *Client, journal func(runID string) PutJournal) *Gate {
	return &Gate{c: c, journal: journal, seen: map[string]Device{}, checked: map[string]int{}}
}

// Client is the Placement client under the gate, for the operator's
// commands (status, clean, retire) that read or write Placement directly.
func (g *Gate) Client() *Client { return g.c }

// FullyReserved reports reserved = total on a device with inventory: the
// fence that keeps it out of Nova's pool.
func FullyReserved(total, reserved int) bool { return total > 0 && reserved >= total }

// Dirty is THE dirty predicate: a device scour may clean now. It is fenced
// (reserved = total), Placement shows no allocation and no usage on it
// (rule 2), and it does not carry the quarantine trait (rule 4). A device
// someone un-reserved meanwhile is not dirty: Nova could hand it out at
// any moment, so it is not wiped. Whether scour manages the device's
// shape (State) is the scan's question, not this one's: the check before
// a destructive step reads a device by its UUID alone.
func Dirty(total, reserved int, inUse, quarantined bool) bool {
	return FullyReserved(total, reserved) && !inUse && !quarantined
}

// Retirable is the predicate before an operator's retirement wipe: the
// device is fenced, quarantined (retired) and free (rule 2).
func Retirable(total, reserved int, inUse, quarantined bool) bool {
	return FullyReserved(total, reserved) && !inUse && quarantined
}

// QuarantineHeld reports a device Placement shows quarantined as the
// store's open quarantine requires: fenced, with the trait (rule 4).
func QuarantineHeld(total, reserved int, quarantined bool) bool {
	return FullyReserved(total, reserved) && quarantined
}

// InUse reports whether Placement shows an allocation (usage or a
// consumer) on the device.
func (d Device) InUse() bool { return d.Used > 0 || len(d.Consumers) > 0 }

// Fenced reports reserved = total (FullyReserved).
func (d Device) Fenced() bool { return FullyReserved(d.Inventory.Total, d.Inventory.Reserved) }

// Dirty applies the dirty predicate (Dirty) to d.
func (d Device) Dirty() bool {
	return Dirty(d.Inventory.Total, d.Inventory.Reserved, d.InUse(), d.Quarantined)
}

// IsPermanent reports an error of the gate that retrying cannot fix: a
// Placement 4xx other than a generation conflict (for instance for a
// consumer id that is not a UUID). Its refusals (ErrAllocated and the
// others above) and transient failures are not.
func IsPermanent(err error) bool {
	for _, refusal := range []error{ErrAllocated, ErrNotAllocated, ErrUnmanaged, ErrQuarantined,
		ErrUnreservedElsewhere, ErrStaleReturn} {
		if errors.Is(err, refusal) {
			return false
		}
	}
	if err == nil || IsRecoverable(err) {
		return false
	}
	var api *APIError
	return errors.As(err, &api) && api.Status >= 400 && api.Status < 500 && api.Status != http.StatusConflict
}

func (g *Gate) remember(d Device) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen[d.UUID] = d
}

func (g *Gate) recall(rp string) (Device, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.seen[rp]
	return d, ok
}

// forget returns and forgets the device's read: after an un-reserve or a
// quarantine it is out of date by construction.
func (g *Gate) forget(rp string) (Device, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.seen[rp]
	delete(g.seen, rp)
	return d, ok
}

// Scan lists this host's one-time-use devices with their state,
// remembering each read.
func (g *Gate) Scan(ctx context.Context) ([]Device, error) {
	res, err := g.c.Scan(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range res.Devices {
		g.remember(d)
	}
	return res.Devices, nil
}

// InstanceDevices reads one instance's allocations on this host's tree
// (Client.InstanceDevices). Those give only each device's reference and
// usage: one inventory read per device follows (Client.WithInventories,
// not a full Device read of 3 calls), so the handlers burn only what Nova
// left unburned (and count only real burns). A device whose read failed
// keeps Total 0 and is burned anyway: Burn is idempotent, so the read is
// never needed for safety.
func (g *Gate) InstanceDevices(ctx context.Context, instance string) (*InstanceClaim, error) {
	ic, err := g.c.InstanceDevices(ctx, instance)
	if err != nil {
		return nil, err
	}
	if len(ic.Devices) > 0 {
		_ = g.c.WithInventories(ctx, ic) // a device it failed on is Burn's to read and report
	}
	return ic, nil
}

// ReadDevice reads inventory and allocations (Client.ReadDevice, 1 or 2
// calls) and remembers the read. Its traits are known when the claim
// proved them at the read's generation (claimtraits.go): then the first
// HasAllocations may answer from it; otherwise HasAllocations confirms it
// with one listing shared by the devices checked together
// (Client.ConfirmShared). ErrNotFound: the device left the tree.
func (g *Gate) ReadDevice(ctx context.Context, dev Ref) (Device, error) {
	d, err := g.c.ReadDevice(ctx, dev)
	if err != nil {
		return d, err
	}
	g.remember(d)
	return d, nil
}

// Burn sets reserved = total on an allocated device (Client.Burn).
func (g *Gate) Burn(ctx context.Context, dev Ref) error { return g.c.Burn(ctx, dev) }

// Refence fences again an unallocated Cyborg device (Client.Refence).
func (g *Gate) Refence(ctx context.Context, dev Ref) error { return g.c.Refence(ctx, dev) }

// Quarantine adds the quarantine trait and keeps the device reserved.
func (g *Gate) Quarantine(ctx context.Context, dev Ref, reason string) error {
	g.forget(dev.UUID)
	return g.c.Quarantine(ctx, dev, reason)
}

// Unreserve returns the device cleaned by run runID to the pool. A device
// read since (by HasAllocations before the destructive step, or a scan)
// is written with one PUT at the generation of that read: Placement
// refuses it if anything changed since, and the client then re-reads and
// re-verifies (UnreserveSeen; it re-verifies too when that read does not
// show the device dirty). Otherwise it is Unreserve: read, verify, write.
// Each PUT is journaled with run runID first (PutJournal), so a scourd
// that stops before recording the answer can tell later whether the
// device may have been in the pool since.
func (g *Gate) Unreserve(ctx context.Context, dev Ref, runID string) error {
	var j PutJournal
	if runID != "" && g.journal != nil {
		j = g.journal(runID)
	}
	if seen, ok := g.forget(dev.UUID); ok {
		return g.c.UnreserveSeen(ctx, seen, j)
	}
	return g.c.Unreserve(ctx, dev, j)
}

// HasAllocations is the pipeline's check immediately before a destructive
// step (rule 2): true ("in use") unless Placement shows the device Dirty
// now. An earlier read of the device is confirmed while its generation
// has not moved, by one listing shared with every device checked at the
// same moment (Client.ConfirmShared), or else read afresh. Either way the
// answer is Placement's state now.
//
// One exception asks Placement nothing: the first check after a release's
// read of the device (ReadDevice) answers from that read when it is
// complete (inventory and traits known at its own generation: the traits
// from the claim, claimtraits.go), shows the device Dirty, and began at
// most placement.check_reuse_window ago (reusable). Once: the read is
// marked used, and every later check (before a retry, after a host-slot
// wait, before a later step) asks Placement. The answer is dated by the
// read (HasAllocationsAsOf), and the pipeline starts no step on an answer
// a second old or more, fresh or reused. The un-reserve after the clean
// is one PUT at that read's generation, so anything written to the device
// since the read (an allocation needs an inventory write first on a
// fenced device) makes it fail with 409 and re-read and re-verify
// (docs/placement.md).
//
// HasAllocations itself never reuses a read: its caller is not told how
// old the answer is. Only HasAllocationsAsOf does.
func (g *Gate) HasAllocations(ctx context.Context, rp string) (bool, error) {
	in, _, err := g.check(ctx, rp, false)
	return in, err
}

// HasAllocationsAsOf is HasAllocations, also saying how old its answer
// is (pipeline.DatedChecker): when the request it came from began, or,
// for an answer reused from the release's read, when that read began.
// The pipeline never starts a destructive step on an answer a second old
// or more: it asks again (pipeline's placementAnswerMaxAge), so a reused
// read stands for Placement's answer exactly as long as a fresh one would.
func (g *Gate) HasAllocationsAsOf(ctx context.Context, rp string) (bool, time.Time, error) {
	return g.check(ctx, rp, true)
}

// check is HasAllocationsAsOf, reusing the release's read only when
// mayReuse.
func (g *Gate) check(ctx context.Context, rp string, mayReuse bool) (bool, time.Time, error) {
	if mayReuse {
		if readAt, ok := g.reuse(rp); ok {
			g.c.metrics.checks.WithLabelValues("reused").Inc()
			return false, readAt, nil
		}
	}
	asked := g.c.now()
	var d Device
	var err error
	how := "read"
	if seen, ok := g.recall(rp); ok {
		d, how, err = g.c.confirmShared(ctx, seen)
	} else {
		d, err = g.c.Device(ctx, Ref{UUID: rp, Name: rp})
	}
	if err != nil {
		return false, asked, err
	}
	g.c.metrics.checks.WithLabelValues(how).Inc()
	d.readAt = time.Time{} // used by a check: never reused
	g.remember(d)
	g.noteChecked(d)
	return !d.Dirty(), asked, nil
}

// reuse reports, and marks used, a remembered read of rp that the check
// before a destructive step may answer from (Client.reusable), with when
// that read began.
func (g *Gate) reuse(rp string) (time.Time, bool) {
	now := g.c.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.seen[rp]
	if !ok || !g.c.reusable(d, now) {
		return time.Time{}, false
	}
	readAt := d.readAt
	d.readAt = time.Time{}
	g.seen[rp] = d
	g.checked[rp] = d.Generation
	return readAt, true
}

// HasAllocationsRetired is the check before an operator's retirement
// wipe: true unless the device is Retirable (fenced, quarantined, free).
func (g *Gate) HasAllocationsRetired(ctx context.Context, rp string) (bool, error) {
	d, err := g.c.Device(ctx, Ref{UUID: rp, Name: rp})
	if err != nil {
		return false, err
	}
	g.remember(d)
	g.noteChecked(d)
	return !Retirable(d.Inventory.Total, d.Inventory.Reserved, d.InUse(), d.Quarantined), nil
}
