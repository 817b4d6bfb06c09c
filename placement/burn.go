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
	if err := checkRef(dev); err != nil {
		return devErr("burn", dev, err)
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		inv, err := c.readInventory(ctx, dev.UUID)
		if err != nil {
			return err
		}
		if inv.Count != 1 || inv.Inv.Total != 1 {
			return fmt.Errorf("%w: %d inventories, total %d", ErrUnmanaged, inv.Count, inv.Inv.Total)
		}
		if inv.Inv.Reserved >= inv.Inv.Total {
			return nil
		}
		_, _, who, err := c.consumers(ctx, dev.UUID, "")
		if err != nil {
			return err
		}
		if len(who) == 0 {
			return ErrNotAllocated
		}
		if err := c.writeReserved(ctx, dev.UUID, inv, inv.Inv.Total); err != nil {
			return err
		}
		c.log.Info("device burned", "device", dev.Name, "rp", dev.UUID, "consumers", who)
		return nil
	}, dev.logAttrs()...)
	return devErr("burn", dev, err)
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
