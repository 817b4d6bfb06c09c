package handlers

import (
	"context"
	"fmt"
)

// sweep has the claims store orphan the active claims older than
// claim_expiry_time that no allocation backs. An instance's claim is
// backed while the instance holds a device of this host, and also while
// one of the claim's devices is allocated to a consumer that no other live
// claim names (a move's migration consumer holds the source device until
// the move is confirmed or reverted). Dormant claims are never orphans.
func (r *Reconciler) sweep(ctx context.Context, devs []Device) error {
	live, err := r.c.LiveClaims(ctx)
	if err != nil {
		return fmt.Errorf("orphan sweep: list live claims: %w (retried at the next scan; check the claims database)", err)
	}
	byRP := map[string]Device{}
	for _, d := range devs {
		byRP[d.RPUUID] = d
	}
	claimants := map[string]map[string]bool{} // RP → instances with a live claim on it
	for _, c := range live {
		for _, d := range c.Devices {
			if claimants[d.RPUUID] == nil {
				claimants[d.RPUUID] = map[string]bool{}
			}
			claimants[d.RPUUID][c.InstanceUUID] = true
		}
	}
	backed := func(_ context.Context, instance string) (bool, error) {
		for _, d := range devs {
			if d.HeldBy(instance) {
				return true, nil
			}
		}
		for _, c := range live {
			if c.InstanceUUID != instance {
				continue
			}
			for _, cd := range c.Devices {
				if d, ok := byRP[cd.RPUUID]; ok && heldForMove(d, instance, claimants[cd.RPUUID]) {
					return true, nil
				}
			}
		}
		return false, nil
	}
	n, err := r.c.SweepOrphans(ctx, backed)
	r.m.claimsSwept.Add(float64(n))
	if n > 0 {
		r.log.Info("orphan claims swept", "claims", n)
	}
	if err != nil {
		return fmt.Errorf("orphan sweep: %w (retried at the next scan; check the claims database)", err)
	}
	return nil
}

// heldForMove: d is allocated, but not to another instance scour knows.
func heldForMove(d Device, instance string, claimants map[string]bool) bool {
	if !d.InUse() {
		return false
	}
	for _, consumer := range d.Consumers {
		if consumer != instance && claimants[consumer] {
			return false // another instance holds the device now
		}
	}
	return true // a migration, or consumers unknown: keep the claim
}
