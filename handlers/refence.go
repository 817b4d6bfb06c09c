package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/placement"
)

// refence fences again every device of the scan that is free, not
// quarantined and below reserved=total while the store knows a tenant
// held it since its last clean: someone lifted the fence before scour
// cleaned it. Cyborg's `openstack accelerator device enable` does, and so
// does its conductor rewriting the provider's inventory with total and
// max_unit only; an inventory set without --amend resets reserved to 0;
// Nova re-creating the device's provider (a new UUID at the same address,
// PreviousTenant's DeviceRP names the old one) starts it at reserved 0.
// Left alone, its freed units would be schedulable uncleaned. An
// allocated device below reserved=total is burned by the scan instead
// (NeedsBurn), whoever lifted the fence. Each re-fence is counted and
// logged at WARN; the next scan finds the device dirty and cleans it.
// Unless full, a device this process found not held, with no tenant
// write since, is not asked about again (tenantcache.go says why that
// misses nothing).
func (r *Reconciler) refence(ctx context.Context, devs []Device, full bool) error {
	var errs []error
	for _, d := range devs {
		if d.InUse() {
			r.forgetTenant(d.RPUUID, d.Address) // a tenant now: ask again once it is free
		}
		if d.State == placement.StateUnmanaged || d.InUse() || d.Quarantined || d.Total < 1 || d.Fenced() {
			continue
		}
		known, epoch := r.knownNotHeld(d)
		if known && !full {
			continue
		}
		t, held, err := r.c.PreviousTenant(ctx, d.RPUUID)
		if err != nil {
			r.m.refences.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("device %s: cannot tell whether the un-fenced device holds a tenant's data: %w (retried at the next scan; check the claims database)", d.RPName, err))
			continue
		}
		if !held {
			r.noteNotHeld(d, epoch)
			continue // cleaned since its last tenant: available
		}
		err = r.p.Refence(ctx, d)
		switch {
		case errors.Is(err, placement.ErrAllocated), errors.Is(err, placement.ErrUnmanaged):
			continue // allocated since the scan (the next scan burns it), or no longer ours
		case err != nil:
			r.m.refences.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("device %s: fencing again (reserved=total) a device whose fence was lifted while it holds instance %s's data: %w (retried at the next scan; until then its free units are schedulable uncleaned: check Placement)", d.RPName, t.Instance, err))
			continue
		}
		r.m.refences.WithLabelValues("ok").Inc()
		r.refencedDuringRun(d.RPUUID, true) // its run must not report a return (M3)
		if t.DeviceRP != "" && t.DeviceRP != d.RPUUID {
			r.m.recreated.WithLabelValues(knowledgeTenant).Inc()
			r.log.Warn("device provider was re-created at the same PCI address before scour cleaned the device; fenced again, it is cleaned before it returns",
				"device", d.RPName, "address", d.Address, "old_rp", t.DeviceRP, "rp", d.RPUUID, "reserved_found", d.Reserved, "total", d.Total, "previous_instance", t.Instance)
		} else {
			r.log.Warn("device was un-fenced before scour cleaned it (openstack accelerator device enable, a Cyborg inventory rewrite, an inventory set without --amend); fenced again, it is cleaned before it returns",
				"device", d.RPName, "rp", d.RPUUID, "reserved_found", d.Reserved, "total", d.Total, "previous_instance", t.Instance)
		}
		r.Trigger("refence")
	}
	return errors.Join(errs...)
}
