package placement

import (
	"context"
	"fmt"
	"slices"
)

// Unreserve returns a cleaned device to the pool: the only way scour does
// so. Each attempt reads the inventory, the allocations and the traits,
// refuses when any consumer holds the device (ErrAllocated) or it is
// quarantined (ErrQuarantined), and PUTs the inventory exactly as read with
// reserved decremented by one (never below 0), at the generation read with
// the allocation check. On a generation conflict it re-reads and
// RE-VERIFIES before retrying (bounded exponential backoff with jitter).
// Network errors and 5xx are retried within the budget, then returned as
// *RecoverableError.
//
// j is the run's PutJournal (nil: one kept in memory for this call): each
// PUT's generation is stored there before it is sent. A device already at
// reserved 0 is success only while a PUT of the run may have landed (an
// unanswered one: it can land after a re-read still showed the device
// reserved, and make the next PUT conflict; or one an earlier call or an
// earlier scourd sent): a resumed run does not decrement twice. With no
// such PUT, nothing of scour's was written: ErrUnreservedElsewhere. A
// device found reserved at a generation beyond the pending PUT's + 1 may
// have served a tenant since that PUT: ErrStaleReturn.
func (c *Client) Unreserve(ctx context.Context, dev Ref, j PutJournal) error {
	if err := checkRef(dev); err != nil {
		return devErr("unreserve", dev, err)
	}
	ps, err := newPutState(ctx, j)
	if err != nil {
		return devErr("unreserve", dev, err)
	}
	return c.unreserve(ctx, dev, ps)
}

// unreserve is Unreserve, after the caller's own PUTs in ps (UnreserveSeen's
// PUT at the generation of an earlier read). A transient failure while
// Keystone does not answer (its token expired or revoked, the re-login
// unanswered) waits until Keystone answers and repeats the whole
// un-reserve, reads and checks included (keystonewait.go).
func (c *Client) unreserve(ctx context.Context, dev Ref, ps *putState) error {
	for {
		err := c.unreserveOnce(ctx, dev, ps)
		if !c.waitsForKeystone(ctx, err) || c.waitForKeystone(ctx, dev, err) != nil {
			return devErr("unreserve", dev, err)
		}
	}
}

func (c *Client) unreserveOnce(ctx context.Context, dev Ref, ps *putState) error {
	return c.retry(ctx, func(ctx context.Context) error {
		inv, err := c.verifiedInventory(ctx, dev)
		if err != nil {
			return err
		}
		_, traits, err := c.traitsOf(ctx, dev.UUID)
		if err != nil {
			return err
		}
		if slices.Contains(traits, c.cfg.QuarantineTrait) {
			return ErrQuarantined
		}
		if !c.managedTraits(traits) {
			// Scour only ever returns one-time-use (or, recognition on,
			// Cyborg) devices to the pool.
			return fmt.Errorf("%w: no %s trait", ErrUnmanaged, c.cfg.OneTimeUseTrait)
		}
		if inv.Inv.Reserved <= 0 {
			if !ps.ours() {
				return ErrUnreservedElsewhere
			}
			c.log.Info("device already unreserved", "device", dev.Name, "rp", dev.UUID)
			return nil
		}
		if err := ps.reread(inv.Generation); err != nil {
			return err
		}
		// Traits live on the same RP generation: if they changed after the
		// inventory read, the PUT below conflicts and everything is re-read.
		return c.put(ctx, dev, inv, ps)
	}, dev.logAttrs()...)
}

// put sends the un-reserve PUT at inv's generation, journaled first.
func (c *Client) put(ctx context.Context, dev Ref, inv *rawInventory, ps *putState) error {
	earlier, err := ps.send(ctx, inv.Generation)
	if err != nil {
		return err
	}
	to := c.returnTo(dev.UUID, inv)
	err = c.writeReserved(ctx, dev.UUID, inv, to)
	if jerr := ps.answered(ctx, err, earlier); jerr != nil {
		c.log.Warn("un-reserve PUT refused with a conflict, but the claims store still holds it as possibly landed; after a restart the device may be cleaned once more than needed",
			"device", dev.Name, "rp", dev.UUID, "error", jerr)
	}
	if err != nil {
		return err
	}
	c.log.Info("device returned to the pool", "device", dev.Name, "rp", dev.UUID,
		"address", dev.Address, "reserved", to, "generation", inv.Generation)
	return nil
}

// verifiedInventory reads the inventory and the allocations and returns the
// inventory only when nobody holds the device and both reads saw the same
// generation (so a PUT at that generation proves nothing changed since).
func (c *Client) verifiedInventory(ctx context.Context, dev Ref) (*rawInventory, error) {
	inv, err := c.readInventory(ctx, dev.UUID)
	if err != nil {
		return nil, err
	}
	if err := c.managedShape(dev.UUID, inv); err != nil {
		return nil, err
	}
	gen, used, who, err := c.consumers(ctx, dev.UUID, "")
	if err != nil {
		return nil, err
	}
	if len(who) > 0 {
		return nil, fmt.Errorf("%w: consumers %v hold %d unit(s)", ErrAllocated, who, used)
	}
	if gen != inv.Generation {
		return nil, errChanged
	}
	return inv, nil
}

// HasAllocations reads the device's allocations now: the pipeline's check
// immediately before its first destructive step (safety rule 2).
func (c *Client) HasAllocations(ctx context.Context, dev Ref) (bool, []string, error) {
	if err := checkRef(dev); err != nil {
		return false, nil, devErr("allocation check", dev, err)
	}
	var who []string
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		_, _, who, err = c.consumers(ctx, dev.UUID, "")
		return err
	}, dev.logAttrs()...)
	if err != nil {
		return false, nil, devErr("allocation check", dev, err)
	}
	return len(who) > 0, who, nil
}

// Device reads one device afresh (inventories, allocations, traits: 3
// calls) and derives its state.
func (c *Client) Device(ctx context.Context, dev Ref) (Device, error) {
	if err := checkRef(dev); err != nil {
		return Device{Ref: dev}, devErr("read", dev, err)
	}
	d := Device{Ref: dev}
	var inv *rawInventory
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		if inv, err = c.readInventory(ctx, dev.UUID); err != nil {
			return err
		}
		gen, used, who, err := c.consumers(ctx, dev.UUID, inv.Inv.ResourceClass)
		if err != nil {
			return err
		}
		tgen, traits, err := c.traitsOf(ctx, dev.UUID)
		if err != nil {
			return err
		}
		if gen != inv.Generation || tgen != gen {
			return errChanged
		}
		d.Generation, d.Used, d.Consumers = gen, used, who
		d.Quarantined = slices.Contains(traits, c.cfg.QuarantineTrait)
		d.traits, d.traitsRead = traits, true
		return nil
	}, dev.logAttrs()...)
	if err != nil {
		return d, devErr("read", dev, err)
	}
	d.Inventory, d.raw = inv.Inv, inv
	slices.Sort(d.Consumers)
	c.derive(&d, inv.Count)
	return d, nil
}
