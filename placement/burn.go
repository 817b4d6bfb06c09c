package placement

import (
	"context"
	"fmt"
)

// Burn sets reserved=total on an allocated one-time-use device whose
// reserved is lower (Nova before 2025.2, or a device flagged OTU late), so
// it cannot be scheduled again once its instance frees it. Idempotent:
// a device already burned is left alone. Refuses (ErrNotAllocated) when
// nobody holds the device: an unallocated device is the pipeline's call.
// Every other inventory field is sent back exactly as read.
func (c *Client) Burn(ctx context.Context, dev Ref) error {
	return c.raiseToTotal(ctx, dev, "burn", func(ctx context.Context) ([]string, error) {
		_, _, who, err := c.consumers(ctx, dev.UUID, "")
		if err == nil && len(who) == 0 {
			err = ErrNotAllocated
		}
		return who, err
	})
}

// raiseToTotal sets reserved=total on a device of a managed shape whose
// reserved is lower, after check (nil: none) agrees; every other field
// is sent back exactly as read, at the generation read (a conflict
// re-reads). Idempotent.
func (c *Client) raiseToTotal(ctx context.Context, dev Ref, what string, check func(context.Context) ([]string, error)) error {
	if err := checkRef(dev); err != nil {
		return devErr(what, dev, err)
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		inv, err := c.readInventory(ctx, dev.UUID)
		if err != nil {
			return err
		}
		if err := c.managedShape(dev.UUID, inv); err != nil {
			return err
		}
		if inv.Inv.Reserved >= inv.Inv.Total {
			return nil
		}
		var who []string
		if check != nil {
			if who, err = check(ctx); err != nil {
				return err
			}
		}
		if err := c.writeReserved(ctx, dev.UUID, inv, inv.Inv.Total); err != nil {
			return err
		}
		c.log.Info("device fenced (reserved=total)", "device", dev.Name, "rp", dev.UUID, "by", what,
			"reserved_found", inv.Inv.Reserved, "total", inv.Inv.Total, "consumers", who)
		return nil
	}, dev.logAttrs()...)
	return devErr(what, dev, err)
}

// reserveAll sets reserved=total whatever the allocations: raising
// reserved only ever keeps a device out of the pool.
func (c *Client) reserveAll(ctx context.Context, dev Ref) error {
	return c.retry(ctx, func(ctx context.Context) error {
		inv, err := c.readInventory(ctx, dev.UUID)
		if err != nil {
			return err
		}
		if inv.Count != 1 {
			return fmt.Errorf("%w: %d inventories", ErrUnmanaged, inv.Count)
		}
		if inv.Inv.Reserved >= inv.Inv.Total {
			return nil
		}
		return c.writeReserved(ctx, dev.UUID, inv, inv.Inv.Total)
	}, dev.logAttrs()...)
}
