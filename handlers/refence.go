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
//
// A device below reserved = total whose run is in flight is fenced again
// whatever the store knows of its tenant (review rev4 M-A: a tenant that
// went unrecorded left it schedulable, half wiped, for the rest of the
// run), unless the run's own un-reserve has begun or the run was queued
// on a read newer than this scan's (the scan's view predates the run:
// unfencedMidRun). The run is marked before the fence is written, so its
// un-reserve, whatever it meets, reports the device as having left its
// fence (elsewhere), never as returned.
func (r *Reconciler) refence(ctx context.Context, devs []Device, snapshot readMark, full bool) error {
	var errs []error
	for _, d := range devs {
		if d.InUse() {
			r.forgetTenant(d.RPUUID, d.Address) // a tenant now: ask again once it is free
		}
		if d.State == placement.StateUnmanaged || d.InUse() || d.Quarantined || d.Total < 1 || d.Fenced() {
			continue
		}
		if r.unfencedMidRun(d.RPUUID, snapshot) {
			errs = append(errs, r.refenceMidRun(ctx, d))
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
		fenced, err := r.fenceAgain(ctx, d)
		if err != nil {
			errs = append(errs, fmt.Errorf("device %s: fencing again (reserved=total) a device whose fence was lifted while it holds instance %s's data: %w (retried at the next scan; until then its free units are schedulable uncleaned: check Placement)", d.RPName, t.Instance, err))
		}
		if !fenced {
			continue
		}
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

// unfencedMidRun says whether rp has a run in flight that was queued on
// a read older than snapshot's (so this scan saw the device during the
// run) and whose own un-reserve has not begun.
func (r *Reconciler) unfencedMidRun(rp string, snapshot readMark) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.running[rp]
	return ok && !q.unreserving && q.read < snapshot.read
}

// refenceMidRun fences again a device found below reserved = total while
// its run cleans it: someone un-reserved it mid-clean and it is
// schedulable half wiped.
func (r *Reconciler) refenceMidRun(ctx context.Context, d Device) error {
	fenced, err := r.fenceAgain(ctx, d)
	if err != nil {
		return fmt.Errorf("device %s: fencing again (reserved=total) a device found un-reserved while scour cleans it: %w (retried at the next scan; until then it is schedulable half wiped: check Placement, and look for another cleaner)", d.RPName, err)
	}
	if fenced {
		r.log.Warn("device was un-reserved while scour cleaned it (another cleaner, Cyborg's device enable, an inventory set without --amend); fenced again; its run will not return it, and a new run cleans it",
			"device", d.RPName, "rp", d.RPUUID, "reserved_found", d.Reserved, "total", d.Total)
	}
	return nil
}

// fenceAgain sets reserved = total on d, counted in refences_total. A run
// in flight on d is marked first (refencedDuringRun), before the write:
// whatever its un-reserve meets, it reports the device as having left its
// fence, never as returned. fenced is false, with no error, when d is
// allocated since the scan (the scan burns it; a run's checks stop it)
// or no longer scour's.
func (r *Reconciler) fenceAgain(ctx context.Context, d Device) (fenced bool, err error) {
	r.refencedDuringRun(d.RPUUID, true)
	err = r.p.Refence(ctx, d)
	switch {
	case errors.Is(err, placement.ErrAllocated), errors.Is(err, placement.ErrUnmanaged):
		return false, nil
	case err != nil:
		r.m.refences.WithLabelValues("error").Inc()
		return false, err
	}
	r.m.refences.WithLabelValues("ok").Inc()
	return true, nil
}
