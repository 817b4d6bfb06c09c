package placement

import (
	"context"
	"fmt"
	"slices"

	"github.com/scour-project/scour/hardware"
)

// Quarantine keeps a device out of the pool until an operator acts:
// reserved=total and the quarantine trait. Placement has no place for the
// reason, so it is logged here and belongs in scour's own record.
// Idempotent.
//
// It returns nil only once Placement showed both at one generation: the
// inventory read at G with reserved=total and the traits read at G with
// the trait, or the trait written at G (quarantineOnce). A run's
// un-reserve PUT may be in flight when a retirement or a scan's
// re-quarantine comes (journaled at G, sent, not yet landed): "reserved =
// total" read before it lands proves nothing, and a trait write that
// conflicts with it lands after it. Once the trait is on at G+k, a PUT
// sent at an older generation can only conflict, and every un-reserve
// refuses a device with the trait (ErrQuarantined).
func (c *Client) Quarantine(ctx context.Context, dev Ref, reason string) error {
	if err := checkRef(dev); err != nil {
		return devErr("quarantine", dev, err)
	}
	if err := c.ensureTrait(ctx, c.cfg.QuarantineTrait); err != nil {
		return devErr("quarantine", dev, err)
	}
	err := c.withTraits(ctx, func(ctx context.Context) error {
		return c.retry(ctx, func(ctx context.Context) error { return c.quarantineOnce(ctx, dev) }, dev.logAttrs()...)
	})
	if err != nil {
		return devErr("quarantine", dev, err)
	}
	c.log.Warn("device quarantined", "device", dev.Name, "rp", dev.UUID, "address", dev.Address, "reason", reason)
	return nil
}

// quarantineOnce is one attempt of Quarantine. The fence comes first (a
// trait write that keeps failing must not leave the device schedulable),
// then the traits are read: at the inventory's generation, so nothing
// was written between the two reads (an un-reserve PUT landing moves the
// generation: errChanged, both read again). The trait is then written at
// that generation: a conflict (the un-reserve landed meanwhile) re-reads
// everything and fences again.
func (c *Client) quarantineOnce(ctx context.Context, dev Ref) error {
	inv, err := c.readInventory(ctx, dev.UUID)
	if err != nil {
		return err
	}
	if inv.Count != 1 {
		return fmt.Errorf("%w: %d inventories", ErrUnmanaged, inv.Count)
	}
	if inv.Inv.Reserved < inv.Inv.Total {
		if err := c.writeReserved(ctx, dev.UUID, inv, inv.Inv.Total); err != nil {
			return err
		}
		if inv, err = c.readInventory(ctx, dev.UUID); err != nil {
			return err
		}
		if inv.Count != 1 || inv.Inv.Reserved < inv.Inv.Total {
			return errChanged
		}
	}
	gen, traits, err := c.traitsOf(ctx, dev.UUID)
	if err != nil {
		return err
	}
	if gen != inv.Generation {
		return errChanged
	}
	if slices.Contains(traits, c.cfg.QuarantineTrait) {
		return nil
	}
	if err := c.putTraits(ctx, dev.UUID, gen, append(slices.Clone(traits), c.cfg.QuarantineTrait)); err != nil {
		return fmt.Errorf("updating traits: %w", err)
	}
	return nil
}

// Unquarantine removes the quarantine trait: an explicit operator action.
// The device stays reserved (dirty), so scour cleans it again before it
// can return to the pool.
func (c *Client) Unquarantine(ctx context.Context, dev Ref) error {
	err := c.editTraits(ctx, dev, func(t []string) []string {
		if !slices.Contains(t, c.cfg.QuarantineTrait) {
			return nil
		}
		return slices.DeleteFunc(t, func(s string) bool { return s == c.cfg.QuarantineTrait })
	})
	if err != nil {
		return devErr("unquarantine", dev, err)
	}
	c.log.Info("device unquarantined", "device", dev.Name, "rp", dev.UUID)
	return nil
}

// CapabilityPrefix starts every capability trait name scour derives
// (scourctl nova-device-spec puts them in Nova's [pci] device_spec).
const CapabilityPrefix = "CUSTOM_SCOUR_CAP_"

// CapabilityTraits maps capabilities to trait names by each capability's
// hardware.TraitRule (booleans, fixed sets; never free values, nor values
// that change during the device's life such as wear), sorted.
// docs/placement.md lists them. Scour does not write them to Placement
// itself: Nova sets each of its PCI device providers' traits to its own
// set on every update, so only traits Nova reports from its [pci]
// device_spec stay.
func CapabilityTraits(caps hardware.Capabilities) []string {
	return caps.StaticTraits(CapabilityPrefix)
}

// editTraits applies edit to the RP's current traits and PUTs the result
// at the generation read, retrying on conflicts. edit returns nil when
// nothing needs to change. Only scour's own traits are ever added or
// removed; everything else read is sent back.
func (c *Client) editTraits(ctx context.Context, dev Ref, edit func([]string) []string) error {
	if err := checkRef(dev); err != nil {
		return err
	}
	if err := c.ensureTrait(ctx, c.cfg.QuarantineTrait); err != nil {
		return err
	}
	return c.withTraits(ctx, func(ctx context.Context) error {
		return c.retry(ctx, func(ctx context.Context) error {
			gen, traits, err := c.traitsOf(ctx, dev.UUID)
			if err != nil {
				return err
			}
			next := edit(slices.Clone(traits))
			if next == nil {
				return nil
			}
			if err := c.putTraits(ctx, dev.UUID, gen, next); err != nil {
				return fmt.Errorf("updating traits: %w", err)
			}
			return nil
		}, dev.logAttrs()...)
	})
}
