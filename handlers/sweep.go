package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// sweep marks orphaned the active claims of this host that no allocation
// backs and that are older than ClaimExpiry. A claim is backed while its
// instance holds the device, and also while the device is allocated to a
// consumer no other claim names (a move's migration consumer holds the
// source device until the move is confirmed or reverted). Dormant claims
// are never orphans.
func (r *Reconciler) sweep(ctx context.Context, devs []Device, now time.Time) error {
	open, err := r.c.OpenClaims(ctx)
	if err != nil {
		return fmt.Errorf("orphan sweep: list open claims: %w (retried at the next scan; check the claims database)", err)
	}
	byRP := map[string]Device{}
	for _, d := range devs {
		byRP[d.RPUUID] = d
	}
	claimants := map[string]map[string]bool{} // RP → instances with an active claim
	for _, c := range open {
		if c.State == ClaimActive {
			if claimants[c.DeviceRP] == nil {
				claimants[c.DeviceRP] = map[string]bool{}
			}
			claimants[c.DeviceRP][c.InstanceUUID] = true
		}
	}
	var errs []error
	for _, c := range open {
		if c.State != ClaimActive || now.Sub(latest(c.CreatedAt, c.UpdatedAt)) < r.cfg.ClaimExpiry {
			continue
		}
		d, ok := byRP[c.DeviceRP]
		if ok && backs(d, c.InstanceUUID, claimants[c.DeviceRP]) {
			continue
		}
		reason := fmt.Sprintf("no allocation of instance %s on device %s for longer than claim_expiry_time (%s)", c.InstanceUUID, c.DeviceRP, r.cfg.ClaimExpiry)
		if err := r.c.SetClaimState(ctx, c.ID, ClaimOrphaned, reason); err != nil {
			errs = append(errs, fmt.Errorf("orphan sweep: claim %s (instance %s): %w", c.ID, c.InstanceUUID, err))
			continue
		}
		r.m.claimsSwept.Inc()
		r.log.Info("orphan claim swept", "claim", c.ID, "instance", c.InstanceUUID, "device_rp", c.DeviceRP)
	}
	return errors.Join(errs...)
}

func backs(d Device, instance string, claimants map[string]bool) bool {
	if d.HeldBy(instance) {
		return true
	}
	if !d.InUse() {
		return false
	}
	if len(d.Consumers) == 0 {
		return true // allocated, consumers unknown: keep the claim
	}
	for _, consumer := range d.Consumers {
		if consumer != instance && claimants[consumer] {
			return false // another instance holds the device now
		}
	}
	return true
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
