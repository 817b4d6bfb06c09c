package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/placement"
)

// The store is the authority on quarantines (verdicts and operator
// retirements) and is written first; Placement only shows them. When the
// Placement write failed (Placement down or conflicting at a retire), or
// the trait or the reservation was lost later, nothing else puts it
// right, and Nova could schedule a retired device (rule 4). So every scan
// compares the two and writes Placement again.

// openQuarantines reads the host's open quarantines; nil when the claims
// store does not keep them.
func (r *Reconciler) openQuarantines(ctx context.Context) (map[string]OpenQuarantine, error) {
	ql, ok := r.c.(QuarantineLister)
	if !ok {
		return nil, nil
	}
	open, err := ql.OpenQuarantines(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading host %s's open quarantines: %w (not checked against Placement this scan; check the claims database)", r.cfg.Host, err)
	}
	return open, nil
}

// lostQuarantines returns the devices of the scan that the store holds
// quarantined but Placement does not show reserved=total with the trait.
func lostQuarantines(devs []Device, open map[string]OpenQuarantine) []Device {
	var lost []Device
	for _, d := range devs {
		if _, held := open[d.RPUUID]; !held || d.State == placement.StateUnmanaged {
			continue
		}
		if placement.QuarantineHeld(d.Total, d.Reserved, d.Quarantined) {
			continue
		}
		lost = append(lost, d)
	}
	return lost
}

// requarantine sets reserved=total and the trait again on the lost
// devices, with a WARN naming each, counted in
// scour_lifecycle_quarantines_restored_total. Nova removes the trait at
// its next update of the provider (it sets its own trait set), so this
// is routine; reserved=total, which Nova never lowers, kept the device
// out of the pool meanwhile. The store is read again first: the
// scan read it before Placement (to keep its read-to-queue window short),
// and an operator's release in between (store first, then the trait)
// must not be undone; it is read as the scan's tree keys it (a
// re-created provider's quarantine is its own, moved or not: devs). A
// failure is retried at the next scan.
func (r *Reconciler) requarantine(ctx context.Context, devs, lost []Device) error {
	if len(lost) == 0 {
		return nil
	}
	open, err := r.openQuarantines(ctx)
	if err != nil {
		return err
	}
	open, _, _ = followQuarantines(devs, open)
	var errs []error
	set := 0
	for _, d := range lost {
		q, held := open[d.RPUUID]
		if !held {
			continue // released meanwhile
		}
		reason := q.Reason
		r.log.Warn("device is quarantined in the store but Placement does not show it reserved and quarantined; setting both again",
			"device", d.RPName, "rp", d.RPUUID, "address", d.Address, "reserved", d.Reserved, "total", d.Total,
			"quarantine_trait", d.Quarantined, "reason", reason)
		if err := r.p.Quarantine(ctx, d, reason); err != nil {
			errs = append(errs, fmt.Errorf("device %s: setting its quarantine (%s) again in Placement: %w (retried at the next scan; until then Nova may schedule it, check Placement)", d.RPName, reason, err))
			continue
		}
		set++
		r.m.requarantined.Inc()
	}
	if set > 0 {
		r.Trigger("quarantine set again") // the devices gauge shows it at once
	}
	return errors.Join(errs...)
}

// quarantinedState is the devices gauge's state of a device that Placement
// or the store holds quarantined: "retired" for an operator's retirement
// (planned, e.g. an RMA: no one needs to act), "quarantined" for anything
// else, a cleaning verdict or a trait the store does not explain, which
// pages (ScourDeviceQuarantined). When the store could not be read (open
// is nil) a retirement counts as quarantined: unsure, a human looks.
func quarantinedState(open map[string]OpenQuarantine, rp string) string {
	if q, ok := open[rp]; ok && q.Retired {
		return gaugeRetired
	}
	return string(placement.StateQuarantined)
}
