package placement

import (
	"context"
	"errors"
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
// A device already at reserved=0 is left alone (idempotent: a resumed run
// does not decrement twice). Network errors and 5xx are retried within
// the budget, then returned as *RecoverableError.
//
// A device found at reserved=0 right after this call's own PUT was
// refused with a conflict is ErrUnreservedElsewhere: nothing of scour's
// was written, so someone else un-reserved it. But once any PUT of this
// call went unanswered (timeout, 5xx), or with no PUT of this call before
// (a resumed run), reserved=0 may be scour's own write, and that is
// success: an unanswered PUT can still land later, after a re-read showed
// the device reserved, and make the next PUT conflict.
func (c *Client) Unreserve(ctx context.Context, dev Ref) error {
	return c.unreserve(ctx, dev, puts{})
}

// puts is what the PUTs of one un-reserve call came to so far.
type puts struct {
	conflicted bool // the last one was refused with a conflict
	unanswered bool // one of them got no definite answer: it may land
}

// ours says whether a device found at reserved 0 may be scour's own write.
func (p puts) ours() bool { return !p.conflicted || p.unanswered }

// unreserve is Unreserve, after the caller's own PUTs p (UnreserveSeen's
// PUT at the generation of an earlier read).
func (c *Client) unreserve(ctx context.Context, dev Ref, p puts) error {
	if err := checkRef(dev); err != nil {
		return devErr("unreserve", dev, err)
	}
	err := c.retry(ctx, func(ctx context.Context) error {
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
		if !slices.Contains(traits, c.cfg.OneTimeUseTrait) {
			// Scour only ever returns one-time-use devices to the pool.
			return fmt.Errorf("%w: no %s trait", ErrUnmanaged, c.cfg.OneTimeUseTrait)
		}
		if inv.Inv.Reserved <= 0 {
			if !p.ours() {
				return ErrUnreservedElsewhere
			}
			c.log.Info("device already unreserved", "device", dev.Name, "rp", dev.UUID)
			return nil
		}
		// Traits live on the same RP generation: if they changed after the
		// inventory read, the PUT below conflicts and everything is re-read.
		err = c.writeReserved(ctx, dev.UUID, inv, inv.Inv.Reserved-1)
		p.conflicted = errors.Is(err, errConflict)
		p.unanswered = p.unanswered || (err != nil && !p.conflicted)
		if err != nil {
			return err
		}
		c.log.Info("device returned to the pool", "device", dev.Name, "rp", dev.UUID,
			"address", dev.Address, "reserved", inv.Inv.Reserved-1)
		return nil
	}, dev.logAttrs()...)
	return devErr("unreserve", dev, err)
}

// verifiedInventory reads the inventory and the allocations and returns the
// inventory only when nobody holds the device and both reads saw the same
// generation (so a PUT at that generation proves nothing changed since).
func (c *Client) verifiedInventory(ctx context.Context, dev Ref) (*rawInventory, error) {
	inv, err := c.readInventory(ctx, dev.UUID)
	if err != nil {
		return nil, err
	}
	if inv.Count != 1 || inv.Inv.Total != 1 {
		return nil, fmt.Errorf("%w: %d inventories, total %d", ErrUnmanaged, inv.Count, inv.Inv.Total)
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
	deriveState(&d, inv.Count)
	return d, nil
}
