package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// rebuildClaims gives a claim to each consumer that Placement shows
// holding devices of this host while no live claim of this host names
// it: after the claims store was lost (a fresh database), or when the
// notification that would have recorded it never came. It works on the
// devices sawHolders just saw change hands (every allocated device at
// start), so a steady host pays nothing: one claims read per new holder,
// and two Placement reads (the consumer's allocations) only for a holder
// without a claim. The claim is built from Placement alone: the
// consumer's devices of this host's tree, its project and user, its
// compute resources. A consumer with any live claim here is left to the
// notifications (a same-host resize has the instance on both sides), and
// only a consumer Placement types INSTANCE (1.38+) gets one: a migration
// consumer is not an instance, and an untyped one could be either. The
// holder recorded by sawHolders still names such consumers in records. Nothing
// is burned here (the scan burns) and nothing known is overwritten. The
// claim has no message id: no notification stands behind it, so a later
// rebuild for the same instance is never mistaken for a replay.
func (r *Reconciler) rebuildClaims(ctx context.Context, fresh []Device) error {
	var errs []error
	done := map[string]bool{}
	for _, d := range fresh {
		consumer := d.Consumers[0]
		if done[consumer] {
			continue
		}
		done[consumer] = true
		existing, err := r.c.ClaimsForInstance(ctx, consumer)
		if err != nil {
			errs = append(errs, fmt.Errorf("consumer %s holding device %s: read claims before rebuilding one: %w (retried at the next scan that sees a new holder; check the claims database)", consumer, d.RPName, err))
			continue
		}
		if slices.ContainsFunc(existing, Claim.Live) {
			continue
		}
		alloc, err := r.p.InstanceAllocations(ctx, consumer)
		if err != nil {
			errs = append(errs, fmt.Errorf("consumer %s holding device %s: read its allocations to rebuild its claim: %w (its record will name it with project unknown; check Placement is reachable)", consumer, d.RPName, err))
			continue
		}
		if alloc.ConsumerType != "INSTANCE" || len(alloc.Devices) == 0 {
			continue // a migration, or Placement before 1.38 cannot tell
		}
		devs := devices(alloc.Devices)
		now := r.now()
		cl := Claim{Host: r.cfg.Host, Node: r.cfg.Node, InstanceUUID: consumer, ProjectID: alloc.ProjectID, UserID: alloc.UserID,
			VCPU: alloc.VCPU, MemoryMB: alloc.MemoryMB, DiskGB: alloc.DiskGB, Devices: devs,
			State: ClaimActive, CreatedAt: now, UpdatedAt: now}
		// A delete handled meanwhile (deleted.go): no claim, or none that
		// outlives it; the devices are the scans' to clean. A tombstone
		// counts only while Placement agrees the instance holds nothing
		// here (a forged delete.end must not leave a device unclaimed).
		if gone, held, err := deletedHere(ctx, r.p, r.c, r.m, r.log, consumer); err != nil || gone {
			if err != nil {
				errs = append(errs, fmt.Errorf("consumer %s: read whether its delete was handled before rebuilding its claim: %w (check the claims database and Placement)", consumer, err))
			}
			continue
		} else if held != nil {
			cl.Devices = devices(held.Devices) // a stale tombstone: the read after it is the newer
		}
		err = r.c.RecordClaim(ctx, cl)
		r.forgetClaim(cl)
		if err != nil {
			errs = append(errs, fmt.Errorf("consumer %s: record the claim rebuilt from Placement for %d device(s): %w (check the claims database)", consumer, len(cl.Devices), err))
			continue
		}
		if gone, _, err := deletedHere(ctx, r.p, r.c, r.m, r.log, consumer); err != nil || gone {
			if err == nil {
				err = r.c.ReleaseClaim(ctx, consumer, false, "instance deleted while its claim was rebuilt", "")
				r.Trigger("claim rebuilt for deleted instance " + consumer)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("consumer %s: end the claim rebuilt while its delete was handled: %w (the orphan sweep ends it; check the claims database and Placement)", consumer, err))
			}
			continue
		}
		r.log.Info("claim rebuilt from Placement: a consumer holds devices of this host and no claim named it (lost claims store or missed notification)",
			"instance", consumer, "project", alloc.ProjectID, "devices", len(cl.Devices))
	}
	return errors.Join(errs...)
}

// devices names Placement's devices as a claim names them.
func devices(alloc []Device) []ClaimDevice {
	devs := make([]ClaimDevice, 0, len(alloc))
	for _, a := range alloc {
		devs = append(devs, ClaimDevice{RPUUID: a.RPUUID, RPName: a.RPName, Address: a.Address, ResourceClass: a.ResourceClass})
	}
	return devs
}
