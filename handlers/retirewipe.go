package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/placement"
)

// wipeUsedRetirements asks the store about every device of the scan whose
// operator's retirement waits for no wipe (Operator.RetireWipe found it
// holding no tenant's data): when a tenant is known to have held it since
// that decision (Nova allocated it before the retirement fenced it, e.g.
// while Placement refused the quarantine write; this scan's holders are
// recorded first), the retirement waits for its retirement wipe now, and
// a scan that finds nothing holding the device runs it (review rev5 F4).
// Without that the device would be retired unwiped under a record saying
// no wipe was needed. A WARN names the device and the tenant; a failure
// is retried at the next scan.
func (r *Reconciler) wipeUsedRetirements(ctx context.Context, devs []Device, open map[string]OpenQuarantine) error {
	rw, ok := r.c.(RetirementWiper)
	if !ok {
		return nil
	}
	var errs []error
	pending := 0
	for _, d := range devs {
		q, held := open[d.RPUUID]
		if !held || !q.Retired || q.Wipe || d.State == placement.StateUnmanaged {
			continue
		}
		t, changed, err := rw.WipeRetirementIfUsed(ctx, d.RPUUID)
		if err != nil {
			errs = append(errs, fmt.Errorf("device %s: cannot tell whether a tenant held it after its retirement decided it needs no wipe: %w (retried at the next scan; check the claims database)", d.RPName, err))
			continue
		}
		if !changed {
			continue
		}
		pending++
		r.log.Warn("retired device was held by a tenant after its retirement decided no wipe was needed (Nova allocated it before the retirement fenced it); its retirement wipe is pending: it is wiped before it leaves, once nothing holds it",
			"device", d.RPName, "rp", d.RPUUID, "address", d.Address, "instance", t.Instance)
	}
	if pending > 0 {
		r.Trigger("retirement wipe pending")
	}
	return errors.Join(errs...)
}
