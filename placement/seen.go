package placement

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Placement bumps a resource provider's generation on every write of its
// inventory or its traits and on every allocation written against it
// (deleting a consumer's allocations does not bump it: inventory.go). So
// what was read at generation G still holds while the provider is at G,
// but for allocations that went away: a later read that returns G
// confirms every earlier read at G, and a write carrying G fails with 409
// if anything was written since. The calls below use this to clean a
// released device with 3 or 4 Placement calls: ReadDevice (1 when the
// inventory read at the claim is still at the device's generation, else
// 2), Confirm before the first destructive step (1), UnreserveSeen (1);
// devices checked together share one listing instead of a Confirm each
// (ConfirmShared, eligible.go): 2 or 3 calls each, plus the listings.
// When the claim also proved the device's traits at that generation
// (claimtraits.go), the read is complete and the first check answers
// from it once within placement.check_reuse_window (Gate.HasAllocationsAsOf,
// reusable): 2 calls, the read and the PUT.

// ReadDevice reads one device afresh: its allocations, and its inventory
// at the same generation (2 calls, or 1 when the last inventory read is at
// that generation: readPair). Its traits are known when a claim's listing
// proved them at that same generation (withClaimTraits: the read is then
// complete, one-time-use and not quarantined); otherwise they are not
// read, and Quarantined is false until Confirm reads them. The read
// records when it began (readAt), for Gate.HasAllocationsAsOf' reuse.
func (c *Client) ReadDevice(ctx context.Context, dev Ref) (Device, error) {
	if err := checkRef(dev); err != nil {
		return Device{Ref: dev}, devErr("read", dev, err)
	}
	began := c.now()
	d, err := c.readDevice(ctx, provider{UUID: dev.UUID, Name: dev.Name}, false)
	if err != nil {
		return d, devErr("read", dev, err)
	}
	c.withClaimTraits(&d)
	d.readAt = began
	return d, nil
}

// Confirm re-reads seen immediately before a destructive step. One call
// (the traits, which carry the generation) when the device is still at
// seen's generation: then its allocations and inventory are those seen
// read, and its traits are now known too. Otherwise (something changed, or
// seen came from no read) it reads the device afresh (3 calls).
func (c *Client) Confirm(ctx context.Context, seen Device) (Device, error) {
	if err := checkRef(seen.Ref); err != nil {
		return seen, devErr("read", seen.Ref, err)
	}
	if seen.raw == nil {
		return c.Device(ctx, seen.Ref)
	}
	var gen int
	var traits []string
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		gen, traits, err = c.traitsOf(ctx, seen.UUID)
		return err
	}, seen.Ref.logAttrs()...)
	if err != nil {
		return seen, devErr("read", seen.Ref, err)
	}
	if gen != seen.Generation {
		return c.Device(ctx, seen.Ref)
	}
	d := seen
	d.Consumers = slices.Clone(seen.Consumers)
	d.traits, d.traitsRead = traits, true
	d.Quarantined = slices.Contains(traits, c.cfg.QuarantineTrait)
	d.Why = ""
	c.derive(&d, seen.raw.Count)
	return d, nil
}

// UnreserveSeen returns a cleaned device to the pool with one PUT at the
// generation seen was read at, when seen (from Device or Confirm) showed
// it exactly as Unreserve requires: no allocation, fully reserved, the
// one-time-use trait, no quarantine trait, and no earlier PUT of the run
// pending in j. Placement answers 409 if anything changed since; then,
// and whenever seen does not qualify, it is Unreserve: re-read, RE-VERIFY,
// write. A 409 followed by a re-read at reserved 0 is
// ErrUnreservedElsewhere (see Unreserve).
func (c *Client) UnreserveSeen(ctx context.Context, seen Device, j PutJournal) error {
	if err := checkRef(seen.Ref); err != nil {
		return devErr("unreserve", seen.Ref, err)
	}
	ps, err := newPutState(ctx, j)
	if err != nil {
		return devErr("unreserve", seen.Ref, err)
	}
	if !c.unreservable(seen) || ps.pending || !ps.at(seen.Generation) {
		// A read at another generation than the run's all-clear is
		// re-read, so what refuses it says why (reserved 0: someone
		// else's un-reserve; otherwise sinceClear).
		return c.unreserve(ctx, seen.Ref, ps)
	}
	err = c.put(ctx, seen.Ref, seen.raw, ps)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errConflict):
		// Expected now and then (an allocation, scour's own capability
		// traits): a 409 Placement is right to send, not a failure. Nothing
		// of ours was written: a device now at reserved 0 was un-reserved
		// by someone else.
		c.metrics.retries.WithLabelValues("conflict").Inc()
		c.log.Info("device changed since the check before its destructive step; re-reading and re-verifying it before the un-reserve",
			"device", seen.Name, "rp", seen.UUID, "generation", seen.Generation)
		return c.unreserve(ctx, seen.Ref, ps)
	case IsRecoverable(err):
		var r retries
		r.add(err)
		c.reportRetries(r, "no answer to the un-reserve; re-reading and re-verifying the device", seen.Ref.logAttrs()...)
		// After a lost answer our PUT may have landed: reserved 0 is ours.
		return c.unreserve(ctx, seen.Ref, ps)
	}
	return devErr("unreserve", seen.Ref, err)
}

// reusable says whether d, a read by ReadDevice that no check used yet,
// may stand for Placement's answer at now: it is complete and shows the
// device exactly as UnreserveSeen requires (unreservable: inventory and
// traits at the read's generation, Dirty), and it began at most
// placement.check_reuse_window before now (0: never).
func (c *Client) reusable(d Device, now time.Time) bool {
	w := c.cfg.checkReuseWindow()
	if d.readAt.IsZero() || w <= 0 {
		return false
	}
	age := now.Sub(d.readAt)
	return age >= 0 && age <= w && c.unreservable(d)
}

func (c *Client) unreservable(d Device) bool {
	return d.raw != nil && d.traitsRead && c.managedShape(d.UUID, d.raw) == nil &&
		d.raw.Generation == d.Generation && d.Dirty() &&
		c.managedTraits(d.traits) && !slices.Contains(d.traits, c.cfg.QuarantineTrait)
}
