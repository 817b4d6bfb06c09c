package handlers

import (
	"context"
	"errors"
	"fmt"
)

// refence fences again every Cyborg device of the scan that is free,
// not quarantined and below reserved=total while the store knows a tenant
// held it since its last clean: someone lifted scour's fence (Cyborg's
// `openstack accelerator device enable`, or the conductor rewriting the
// provider's inventory with total and max_unit only when the device's
// num_accelerators changes) before scour cleaned it. Left alone, its
// freed units would be schedulable uncleaned. An allocated device below
// reserved=total is burned by the scan instead (NeedsBurn), whoever
// lifted the fence. Each re-fence is counted and logged at WARN; the next
// scan finds the device dirty and cleans it.
func (r *Reconciler) refence(ctx context.Context, devs []Device) error {
	var errs []error
	for _, d := range devs {
		if !d.Cyborg || d.State == StateUnmanaged || d.InUse() || d.Quarantined || d.Total < 1 || d.Reserved >= d.Total {
			continue
		}
		t, held, err := r.c.PreviousTenant(ctx, d.RPUUID)
		if err != nil {
			r.m.refences.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("device %s: cannot tell whether the un-fenced Cyborg device holds a tenant's data: %w (retried at the next scan; check the claims database)", d.RPName, err))
			continue
		}
		if !held {
			continue // cleaned since its last tenant: available
		}
		err = r.p.Refence(ctx, d)
		switch {
		case errors.Is(err, ErrAllocated), errors.Is(err, ErrUnmanaged):
			continue // allocated since the scan (the next scan burns it), or no longer ours
		case err != nil:
			r.m.refences.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("device %s: fencing again (reserved=total) a Cyborg device whose fence was lifted while it holds instance %s's data: %w (retried at the next scan; until then its free units are schedulable uncleaned: check Placement)", d.RPName, t.Instance, err))
			continue
		}
		r.m.refences.WithLabelValues("ok").Inc()
		r.log.Warn("Cyborg device was un-fenced before scour cleaned it (openstack accelerator device enable, or the Cyborg conductor rewrote its inventory); fenced again, it is cleaned before it returns",
			"device", d.RPName, "rp", d.RPUUID, "reserved_found", d.Reserved, "total", d.Total, "previous_instance", t.Instance)
		r.Trigger("refence")
	}
	return errors.Join(errs...)
}
