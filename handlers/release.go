package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/scour-project/scour/command"
)

// release handles delete, shelve_offload, the source side of a finished
// move and the revert broadcast. All four follow one rule: a claim of this
// host that no allocation of the instance backs any more is released (or,
// for shelve_offload, kept dormant); a claim still backed is kept. So a
// forged or early delete for a running instance releases nothing, the
// revert broadcast releases only on the host the instance left, and the
// host keeping the instance (revert) re-records its claims. The host is
// then reconciled: Placement, not the command, decides which device is
// dirty. A broadcast (revert, or a delete nova-api sent with no host)
// triggers a scan only on hosts that hold a claim or an allocation of the
// instance, so one broadcast does not cost a scan on every host; the
// periodic scan covers a host whose claim was never recorded.
func (h *Handler) release(ctx context.Context, log *slog.Logger, c *command.Command) error {
	scan := c.Scope == command.ScopeHost
	defer func() {
		if scan {
			h.rec.Trigger(fmt.Sprintf("%s of instance %s", c.Kind, c.InstanceUUID))
		}
	}()
	alloc, err := h.p.InstanceAllocations(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read allocations from Placement before releasing claims: %w (retried; check Placement is reachable)", c.InstanceUUID, err)
	}
	existing, err := h.c.ClaimsForInstance(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read claims: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	backed := map[string]bool{}
	for _, d := range alloc.Devices {
		backed[d.RPUUID] = true
	}
	target, reason := ClaimReleased, c.EventType
	if c.Kind == command.KindShelveOffload {
		target, reason = ClaimDormant, "shelved offloaded ("+c.EventType+")"
	}
	scan = scan || len(alloc.Devices) > 0
	var errs []error
	for _, cl := range existing {
		if cl.State == ClaimReleased || cl.State == ClaimOrphaned {
			continue
		}
		scan = true
		if cl.State == target {
			continue
		}
		if backed[cl.DeviceRP] {
			continue
		}
		if err := h.c.SetClaimState(ctx, cl.ID, target, reason); err != nil {
			errs = append(errs, fmt.Errorf("instance %s device %s: mark claim %s %s: %w (retried)", c.InstanceUUID, cl.DeviceRP, cl.ID, target, err))
			continue
		}
		log.Info("claim "+string(target), "device_rp", cl.DeviceRP, "address", cl.Address, "claim", cl.ID)
	}
	if len(alloc.Devices) > 0 {
		if c.Kind == command.KindRevert {
			errs = append(errs, h.record(ctx, log, c, alloc, existing))
		} else {
			log.Warn("instance still holds one-time-use devices of this host; their claims are kept and nothing is cleaned (early, duplicate or forged notification?)",
				"devices", len(alloc.Devices))
		}
	}
	return errors.Join(errs...)
}
