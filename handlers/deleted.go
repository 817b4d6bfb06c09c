package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/scour-project/scour/command"
)

// Nova can send an instance's create.end and delete.end so that scour
// handles them at the same time (the create.end of a large instance is
// still burning and recording when the delete comes) or in either order
// (a redelivered create.end). A claim must never outlive the delete that
// was handled before it was written. The delete of an instance that holds
// nothing here any more leaves a tombstone in the claims store
// (Claims.NoteDeleted) and then reads the instance's claims; a claim
// command reads the tombstone before it burns, and again after it wrote
// its claim. Both sides write first and read second, so whichever runs
// second sees the other's write: the delete ends a claim it finds, the
// claim command ends its own claim when it finds the tombstone. Either
// way the claim's devices are read and the dirty ones queued for
// cleaning (a device burned for the claim is cleaned and returned, not
// left reserved), and a crash between the two steps is repaired when the
// command is delivered again (the claim command reads the tombstone even
// when the instance holds nothing any more).
//
// A tombstone is written from a notification's content (rule 3): a
// delete.end of an instance that holds nothing here, which is also true
// of an instance living on another host or not yet scheduled (a forged or
// misrouted delete). So a tombstone suppresses a claim only while
// Placement, read after the tombstone, agrees the instance holds no
// device of this host; Nova deletes an instance's allocations before its
// delete.end, so for a real delete that read is empty. Where Placement
// still shows the instance holding devices here (it migrated or was
// scheduled here after the forged delete), the tombstone is stale: it is
// logged and ignored, the devices are burned and the claim recorded.

// noteDeleted is the delete side: c is a delete (KindRelease) of an
// instance that holds no device of this host any more.
func (h *Handler) noteDeleted(ctx context.Context, log *slog.Logger, c *command.Command, reason string) error {
	if c.Kind != command.KindRelease {
		return nil
	}
	if err := h.c.NoteDeleted(ctx, c.InstanceUUID, c.MessageID); err != nil {
		return fmt.Errorf("instance %s: record that its delete was handled: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	return h.endDeleted(ctx, log, c, reason)
}

// deleted is the claim side's read of the tombstone: gone only when the
// tombstone stands (deletedHere). held is Placement's read made after a
// tombstone was found (nil when there was none).
func (h *Handler) deleted(ctx context.Context, log *slog.Logger, c *command.Command) (gone bool, held *InstanceAllocation, err error) {
	gone, held, err = deletedHere(ctx, h.p, h.c, h.m, log, c.InstanceUUID)
	if err != nil {
		return false, nil, fmt.Errorf("instance %s: read whether its delete was already handled before recording its claim: %w (retried; check the claims database and Placement)", c.InstanceUUID, err)
	}
	return gone, held, nil
}

// deletedHere reads instance's tombstone and, only when there is one, the
// instance's allocations after it: the tombstone stands (gone) only when
// Placement shows the instance holding no device of this host. A
// tombstone Placement contradicts is logged and ignored (stale or
// forged); held is that Placement read, nil when there was no tombstone.
func deletedHere(ctx context.Context, p Placement, c Claims, m *metrics, log *slog.Logger, instance string) (gone bool, held *InstanceAllocation, err error) {
	tomb, err := c.Deleted(ctx, instance)
	if err != nil || !tomb {
		return false, nil, err
	}
	alloc, err := p.InstanceAllocations(ctx, instance)
	if err != nil {
		return false, nil, fmt.Errorf("its delete was handled here, and re-reading its allocations from Placement to confirm it is gone failed: %w", err)
	}
	if len(alloc.Devices) > 0 {
		log.Warn("instance's delete was handled on this host, yet Placement shows it holding one-time-use devices of this host: the tombstone is stale or was written from a forged or misrouted delete.end; ignored, its devices are burned and claimed (check the notification source if this repeats)",
			"instance", instance, "devices", len(alloc.Devices))
		m.tombstones.WithLabelValues("contradicted").Inc()
		return false, &alloc, nil
	}
	m.tombstones.WithLabelValues("stood").Inc()
	return true, &alloc, nil
}

// endDeleted releases the live claims of an instance whose delete this
// host handled, and reads their devices so that the dirty ones are
// cleaned now (a scan follows where a device could not be read or is
// still allocated).
func (h *Handler) endDeleted(ctx context.Context, log *slog.Logger, c *command.Command, reason string) error {
	existing, err := h.c.ClaimsForInstance(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read its claims after its delete: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	var errs []error
	var freed []Device
	for _, cl := range existing {
		if !cl.Live() {
			continue
		}
		if err := h.c.ReleaseClaim(ctx, c.InstanceUUID, cl.ResizeTarget, "instance deleted ("+c.EventType+")", c.MessageID); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: release claim %s of the deleted instance: %w (retried; check the claims database)", c.InstanceUUID, cl.ID, err))
			continue
		}
		log.Warn("claim recorded alongside its instance's delete released; its devices are cleaned", "claim", cl.ID, "devices", len(cl.Devices))
		for _, d := range cl.Devices {
			freed = append(freed, Device{RPUUID: d.RPUUID, RPName: d.RPName, Address: d.Address, ResourceClass: d.ResourceClass})
		}
	}
	if len(freed) > 0 && h.rec.CheckDevices(ctx, freed, reason) {
		h.rec.Trigger(reason)
	}
	return errors.Join(errs...)
}
