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

// deleted is the claim side's read of the tombstone.
func (h *Handler) deleted(ctx context.Context, c *command.Command) (bool, error) {
	gone, err := h.c.Deleted(ctx, c.InstanceUUID)
	if err != nil {
		return false, fmt.Errorf("instance %s: read whether its delete was already handled before recording its claim: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	return gone, nil
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
