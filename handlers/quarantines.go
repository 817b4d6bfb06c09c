package handlers

import (
	"context"
	"errors"
	"fmt"
)

// keepQuarantined holds Placement to the store's open quarantines: a
// device of this scan that the store holds quarantined (a verdict or an
// operator's retire) but that Placement does not show reserved=total with
// the quarantine trait gets both set again. The store is written first;
// when Placement was down or conflicting at that moment, nothing else
// puts it right, and Nova could schedule a retired device (rule 4). devs
// is updated in place for each device put right, so the scan classifies
// it quarantined. A failure is retried at the next scan.
func (r *Reconciler) keepQuarantined(ctx context.Context, devs []Device) error {
	ql, ok := r.c.(QuarantineLister)
	if !ok {
		return nil
	}
	open, err := ql.OpenQuarantines(ctx)
	if err != nil {
		return fmt.Errorf("reading host %s's open quarantines: %w (not checked against Placement this scan; check the claims database)", r.cfg.Host, err)
	}
	var errs []error
	for i, d := range devs {
		reason, held := open[d.RPUUID]
		if !held || d.State == StateUnmanaged || (d.Total > 0 && d.Reserved >= d.Total && d.Quarantined) {
			continue
		}
		r.log.Warn("device is quarantined in the store but Placement does not show it reserved and quarantined; setting both again",
			"device", d.RPName, "rp", d.RPUUID, "address", d.Address, "reserved", d.Reserved, "total", d.Total,
			"quarantine_trait", d.Quarantined, "reason", reason)
		if err := r.p.Quarantine(ctx, d, reason); err != nil {
			errs = append(errs, fmt.Errorf("device %s: setting its quarantine (%s) again in Placement: %w (retried at the next scan; until then Nova may schedule it, check Placement)", d.RPName, reason, err))
			continue
		}
		devs[i].Reserved, devs[i].Quarantined = max(d.Total, d.Reserved), true
	}
	return errors.Join(errs...)
}
