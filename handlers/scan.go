package handlers

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/placement"
	"slices"
	"time"
)

// Scour's refinements of the dirty state, for the devices gauge.
const (
	gaugeCleaning  = "cleaning"
	gaugeBackoff   = "backoff"
	gaugeAbsent    = "absent" // dirty in Placement, not found on this host
	gaugeNoProfile = "no-profile"
	gaugeRetired   = "retired" // quarantined by an operator's scourctl retire, not by a cleaning
)

// Scan reads this host's tree once and acts on it: sets again the
// reservation and trait of devices the store holds quarantined that
// Placement lost (requarantine), burns allocated devices
// Nova left unburned, queues dirty devices for cleaning (never one the scan
// shows allocated, quarantined, absent locally, already running or backing
// off), sweeps orphan claims and reports stuck runs. It returns once the
// work is queued; cleans run on the reconciler's workers under ctx.
func (r *Reconciler) Scan(ctx context.Context, reason string) error {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	snapshot := r.mark() // runs that end, and reads that begin, after this are newer than the scan
	open, qerr := r.openQuarantines(ctx)
	devs, err := r.p.ScanHost(ctx)
	if err != nil {
		r.m.scans.WithLabelValues("error").Inc()
		return fmt.Errorf("scan host %s devices in Placement: %w (retried at the next scan; check Placement is reachable)", r.cfg.Host, err)
	}
	r.m.scans.WithLabelValues("ok").Inc()
	r.sawAddresses(ctx, devs)
	open, moves, orphans := followQuarantines(devs, open)
	if qerr == nil {
		r.reportOrphans(orphans, open)
	}
	lost := lostQuarantines(devs, open)
	now := r.now()
	counts := map[string]int{}
	candidates, toBurn := r.classify(devs, open, snapshot, now, counts)
	for _, d := range candidates {
		if slices.ContainsFunc(lost, func(l Device) bool { return l.RPUUID == d.RPUUID }) {
			counts[quarantinedState(open, d.RPUUID)]++ // never cleaned; requarantine below
			continue
		}
		if r.present(ctx, d) {
			r.enqueue(d, reason, snapshot, now)
			if d.Quarantined { // a retirement waiting for its wipe
				counts[quarantinedState(open, d.RPUUID)]++
			} else {
				counts[r.queuedState(d)]++
			}
		} else {
			counts[gaugeAbsent]++
		}
	}
	errs := []error{qerr, r.reattach(ctx, moves), r.requarantine(ctx, devs, lost)}
	errs = append(errs, r.rebuildClaims(ctx, r.sawHolders(ctx, devs)))
	errs = append(errs, r.wipeUsedRetirements(ctx, devs, open))
	for _, d := range toBurn {
		errs = append(errs, r.burn(ctx, d))
	}
	errs = append(errs, r.refence(ctx, devs, snapshot, r.fullRefence(reason)))
	errs = append(errs, r.recordARQs(ctx, devs))
	errs = append(errs, r.sweep(ctx, devs))
	r.reportStuck(now)
	r.m.devices.Reset()
	for state, n := range counts {
		r.m.devices.WithLabelValues(state).Set(float64(n))
	}
	r.dispatch(ctx)
	return errors.Join(errs...)
}

// classify sorts the scan under r.mu: it drops from the queue every device
// that is no longer dirty and returns the dirty ones free to clean.
func (r *Reconciler) classify(devs []Device, open map[string]OpenQuarantine, snapshot readMark, now time.Time, counts map[string]int) (candidates, toBurn []Device) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range devs {
		seen[d.RPUUID] = true
		switch r.classifyLocked(d, open, snapshot, now, counts) {
		case actClean:
			candidates = append(candidates, d)
		case actBurn:
			toBurn = append(toBurn, d)
		}
	}
	for rp := range r.pending {
		if !seen[rp] { // gone from the tree
			r.dropLocked(rp, snapshot)
		}
	}
	return candidates, toBurn
}

type action int

const (
	actNone action = iota
	actClean
	actBurn
)

// classifyLocked decides what one freshly read device needs, dropping it
// from the queue unless it is dirty and free to clean. counts gets the
// device's gauge state (dirty ones are counted by the caller once queued);
// open, the store's open quarantines, tells a retirement from a verdict.
func (r *Reconciler) classifyLocked(d Device, open map[string]OpenQuarantine, snapshot readMark, now time.Time, counts map[string]int) action {
	_, running := r.running[d.RPUUID]
	b, backingOff := r.backoff[d.RPUUID]
	// A retirement waiting for its wipe is queued like a dirty device
	// (reserved, nothing holds it; InUse is checked first: rule 2), and
	// stays quarantined throughout (rule 4).
	wipe := d.Quarantined && open[d.RPUUID].Wipe && d.State != placement.StateUnmanaged && d.Fenced()
	switch {
	case d.State == placement.StateUnmanaged:
		r.dropLocked(d.RPUUID, snapshot)
		counts[string(placement.StateUnmanaged)]++
	case d.InUse():
		r.dropLocked(d.RPUUID, snapshot)
		if d.NeedsBurn() {
			counts[string(placement.StateInUse)]++
			return actBurn
		}
		counts[string(placement.StateBurnedInUse)]++
	case d.Quarantined && !wipe:
		r.dropLocked(d.RPUUID, snapshot)
		counts[quarantinedState(open, d.RPUUID)]++
	case !wipe && !d.Dirty() && !running: // a running one below reserved = total is fenced again (refence)
		r.dropLocked(d.RPUUID, snapshot)
		delete(r.backoff, d.RPUUID)
		counts[string(placement.StateAvailable)]++
	case running:
		counts[gaugeCleaning]++
	case r.finished[d.RPUUID] > snapshot.seq:
		// A run ended after this read of Placement: the read predates its
		// verdict (quarantine trait, un-reserve). The next scan, triggered
		// by that end, decides.
		r.dropLocked(d.RPUUID, snapshot)
		counts[gaugeCleaning]++
	case backingOff && now.Before(b.until):
		r.dropLocked(d.RPUUID, snapshot)
		counts[b.why]++
	default:
		return actClean
	}
	return actNone
}

// queuedState is the gauge state of a dirty device queued for cleaning:
// dirty, or no-profile when its last run found no profile. Its backoff has
// just ended, so the run will most likely find none again; counting it
// dirty would drop the no-profile series at every backoff end, and the
// ScourDeviceNotCleanable alert (for: 15m) would fire late or never while
// the backoff is shorter than that. It stays no-profile until a run finds
// a profile (then the next scan shows it cleaning or available).
func (r *Reconciler) queuedState(d Device) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.backoff[d.RPUUID]; ok && b.why == gaugeNoProfile {
		return gaugeNoProfile
	}
	return string(placement.StateDirty)
}

// present is safety rule 3's local half: a dirty device in Placement that
// this host cannot see is reported, not cleaned.
func (r *Reconciler) present(ctx context.Context, d Device) bool {
	ok, err := r.hw.Present(ctx, d.Address)
	if err != nil {
		r.log.Warn("cannot tell whether a dirty device is present; not cleaned this scan", "device", d.RPName, "address", d.Address, "error", err)
		return false
	}
	if !ok {
		r.log.Warn("dirty device in Placement is not a PCI device of this host; not cleaned (check [pci] device_spec, the RP name and the PCI bus)", "device", d.RPName, "address", d.Address)
	}
	return ok
}

func (r *Reconciler) burn(ctx context.Context, d Device) error {
	err := r.p.Burn(ctx, d)
	if errors.Is(err, placement.ErrNotAllocated) || errors.Is(err, placement.ErrUnmanaged) {
		return nil // freed since the scan read it (the next scan sees it dirty), or not ours
	}
	if err != nil {
		r.m.burns.WithLabelValues("error").Inc()
		return fmt.Errorf("device %s: burn (reserved=total) of an allocated device: %w (retried at the next scan; until then the device could return to the pool uncleaned)", d.RPName, err)
	}
	r.m.burns.WithLabelValues("ok").Inc()
	r.log.Info("burned an allocated device Nova left unburned", "device", d.RPName, "consumers", d.Consumers)
	return nil
}

// enqueue queues a dirty device unless a run for it started since the
// scan classified it: that run's end drops the queue entry, and only a scan
// after it may queue the device again (it may be available by then).
func (r *Reconciler) enqueue(d Device, trigger string, snapshot readMark, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Re-checked under the lock: a run may have started, or started and
	// ended (with a backoff), while the scan asked the hardware.
	if _, running := r.running[d.RPUUID]; running || r.finished[d.RPUUID] > snapshot.seq {
		return
	}
	if b, backingOff := r.backoff[d.RPUUID]; backingOff && now.Before(b.until) {
		return
	}
	if q, ok := r.pending[d.RPUUID]; ok {
		if snapshot.read >= q.read {
			q.dev, q.read = d, snapshot.read // keep its place and first trigger, refresh the read
			r.pending[d.RPUUID] = q
		}
		return
	}
	r.pending[d.RPUUID] = queued{dev: d, trigger: trigger, since: now, read: snapshot.read}
	r.order = append(r.order, d.RPUUID)
}

func (r *Reconciler) unqueueLocked(rp string) {
	delete(r.pending, rp) // order is cleaned lazily by popLocked
}

// dropLocked unqueues rp for what a read found, unless a read that began
// after this one queued it: that read saw Placement later (a release read
// the device after Nova freed it; a scan that began before may have seen
// it still allocated). Keeping an entry is always safe: the cleaner asks
// Placement again before its first destructive step (rule 2).
func (r *Reconciler) dropLocked(rp string, snapshot readMark) {
	if q, ok := r.pending[rp]; ok && q.read > snapshot.read {
		return
	}
	r.unqueueLocked(rp)
}

// reportStuck logs and counts runs in flight longer than StuckAfter.
func (r *Reconciler) reportStuck(now time.Time) {
	r.mu.Lock()
	var stuck []queued
	for _, q := range r.running {
		if now.Sub(q.since) > r.cfg.StuckAfter {
			stuck = append(stuck, q)
		}
	}
	r.mu.Unlock()
	r.m.stuck.Set(float64(len(stuck)))
	for _, q := range stuck {
		running := now.Sub(q.since)
		r.log.Error("cleaning run is stuck: in flight longer than stuck_after; the device stays reserved (check the cleaner's logs and the step's process; restart scourd to resume the run from its checkpoint)",
			"device", q.dev.RPName, "address", q.dev.Address, "running", running.Round(time.Second), "stuck_after", r.cfg.StuckAfter)
		if r.onStuck != nil {
			r.onStuck(q.dev, running)
		}
	}
}

// sawHolders records each allocated device's consumer, so that the record
// of its next cleaning names the tenant Placement showed last even when no
// notification announced it. Only changes are written; it returns the
// devices whose consumer this process had not seen holding them before
// (every allocated device at start).
func (r *Reconciler) sawHolders(ctx context.Context, devs []Device) (fresh []Device) {
	var live []Claim // read once, when a consumer no claim names is seen
	for _, d := range devs {
		if len(d.Consumers) != 1 {
			continue // none, or several (a move in flight): no single tenant to name
		}
		consumer := d.Consumers[0]
		r.mu.Lock()
		known := r.holders[d.RPUUID] == consumer
		r.mu.Unlock()
		if known {
			continue
		}
		holder := r.moveHolder(ctx, d, consumer, &live)
		err := r.c.SawHolder(ctx, d.RPUUID, holder)
		r.forgetTenant(d.RPUUID, d.Address)
		if err != nil {
			r.log.Warn("could not record the consumer holding a device; its next cleaning record may name an older tenant", "device", d.RPName, "consumer", consumer, "error", err)
			continue
		}
		r.mu.Lock()
		r.holders[d.RPUUID] = consumer
		r.mu.Unlock()
		fresh = append(fresh, d)
	}
	return fresh
}

// moveHolder is who holds the device's data when Placement shows consumer
// holding it: the consumer itself, except for a move's migration. Nova
// moves a resized or migrated instance's source allocation to the
// migration's uuid until the move is confirmed or reverted; the data is
// still the instance's, so the holder recorded is the instance of the
// device's live claim. The identity comes from the store's claim, and only
// when Placement types the consumer MIGRATION (1.38+; an older Placement
// cannot tell, and the consumer is recorded as seen). live caches the live
// claims for one scan.
func (r *Reconciler) moveHolder(ctx context.Context, d Device, consumer string, live *[]Claim) string {
	if *live == nil {
		cs, err := r.c.LiveClaims(ctx)
		if err != nil {
			r.log.Warn("could not read the live claims; the consumer holding a device is recorded as seen (a move's migration is named instead of its instance)", "device", d.RPName, "consumer", consumer, "error", err)
			return consumer
		}
		*live = append(cs, Claim{}) // non-nil even when empty
	}
	var owner string
	for _, c := range *live {
		if !c.HasDevice(d.RPUUID) {
			continue
		}
		if c.InstanceUUID == consumer {
			return consumer
		}
		if owner != "" && owner != c.InstanceUUID {
			return consumer // two instances claim it: no single owner to name
		}
		owner = c.InstanceUUID
	}
	if owner == "" {
		return consumer
	}
	alloc, err := r.p.InstanceAllocations(ctx, consumer)
	if err != nil {
		r.log.Warn("could not read the allocations of the consumer holding a claimed device; recorded as seen", "device", d.RPName, "consumer", consumer, "claimed_by", owner, "error", err)
		return consumer
	}
	if alloc.ConsumerType != "MIGRATION" {
		return consumer
	}
	r.log.Info("a move's migration holds the device; its data is the instance's, which the record names", "device", d.RPName, "migration", consumer, "instance", owner)
	return owner
}
