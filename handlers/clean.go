package handlers

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"log/slog"
	"math/rand/v2"
	"time"
)

// dispatch starts workers for queued devices, up to MaxConcurrentCleans.
// A worker keeps taking queued devices until the queue is empty, so the
// number of goroutines never exceeds the limit however long the queue is.
func (r *Reconciler) dispatch(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.running) < r.cfg.MaxConcurrentCleans {
		q, ok := r.popLocked()
		if !ok {
			return
		}
		r.wg.Add(1)
		go r.work(ctx, q)
	}
}

// popLocked takes the oldest queued device and marks it running.
func (r *Reconciler) popLocked() (queued, bool) {
	for len(r.order) > 0 {
		rp := r.order[0]
		r.order = r.order[1:]
		q, ok := r.pending[rp]
		if !ok {
			continue // unqueued by a later scan
		}
		delete(r.pending, rp)
		q.since = r.now()
		r.running[rp] = q
		return q, true
	}
	return queued{}, false
}

func (r *Reconciler) work(ctx context.Context, q queued) {
	defer r.wg.Done()
	for {
		rescan := r.cleanOne(ctx, q)
		r.mu.Lock()
		delete(r.running, q.dev.RPUUID)
		r.seq++
		r.finished[q.dev.RPUUID] = r.seq
		// A queue entry made from a scan before this run's verdict is stale:
		// the device may be back in the pool. Only a later scan re-queues it.
		r.unqueueLocked(q.dev.RPUUID)
		var ok bool
		if ctx.Err() == nil {
			q, ok = r.popLocked()
		}
		r.mu.Unlock()
		if rescan != "" {
			// After the finished stamp: a scan before it would still take
			// the device for running and leave it to the follow-up scan.
			r.Trigger(rescan)
		}
		if !ok {
			return
		}
	}
}

// cleanOne runs one device's pipeline and acts on the verdict. Only
// "clean" leads to an un-reserve (safety rule 1), and the gate re-checks
// allocations inside it (rule 2). Everything else keeps the device
// reserved (rule 4). It returns why a scan should follow at once ("" for
// none).
func (r *Reconciler) cleanOne(ctx context.Context, q queued) (rescan string) {
	d := q.dev
	log := r.log.With("device", d.RPName, "rp", d.RPUUID, "address", d.Address, "trigger", q.trigger)
	req := CleanRequest{Device: d, Trigger: q.trigger}
	if prev, ok, err := r.c.PreviousTenant(ctx, d.RPUUID); err != nil {
		log.Warn("previous tenant unknown: claims database unreadable; the record says unknown", "error", err)
	} else if ok {
		req.PreviousInstance, req.PreviousProject = prev.Instance, prev.Project
	}
	log = log.With("previous_instance", req.PreviousInstance)
	r.m.cleansStarted.Inc()
	log.Info("cleaning run started")
	res, err := r.cl.Clean(ctx, req)
	if err != nil && ctx.Err() != nil {
		// scourd is stopping (SIGTERM): not a failure, nothing to page
		// about; the next start resumes the run from its checkpoint.
		log.Info("run interrupted, will resume from its checkpoint when scourd starts again", "error", err)
		return ""
	}
	if err != nil {
		r.m.cleansDone.WithLabelValues("error").Inc()
		log.Error("cleaning run failed; the device stays reserved and is retried after a backoff", "error", err)
		r.fail(d, gaugeBackoff)
		return ""
	}
	r.m.cleansDone.WithLabelValues(string(res.Verdict)).Inc()
	log = log.With("run", res.RunID, "verdict", res.Verdict)
	switch res.Verdict {
	case pipeline.VerdictClean:
		return r.unreserve(ctx, log, d, res)
	case pipeline.VerdictQuarantine:
		return r.quarantine(ctx, log, d, res)
	case pipeline.VerdictRetryLater:
		log.Warn("cleaning run will be retried; the device stays reserved", "detail", res.Detail)
		r.fail(d, gaugeBackoff)
	case pipeline.VerdictAborted:
		log.Info("device got allocated during the run; left alone", "detail", res.Detail)
	case pipeline.VerdictNoProfile:
		// Not quarantined: the device is not faulty, the config lacks a
		// profile. It stays reserved and visible; a config fix lets a
		// later scan clean it without an operator un-quarantine.
		log.Error("no cleaning profile matches the device; it stays reserved and is never returned uncleaned (add a profile for its resource class or vendor:product)", "detail", res.Detail)
		r.fail(d, gaugeNoProfile)
	default:
		log.Error("cleaner returned an unknown verdict; treated as retry-later", "detail", res.Detail)
		r.fail(d, gaugeBackoff)
	}
	return ""
}

func (r *Reconciler) unreserve(ctx context.Context, log *slog.Logger, d Device, res CleanResult) (rescan string) {
	rr, recorder := r.cl.(ReturnRecorder)
	notReturned := func(why string, final bool) {
		if !recorder {
			return
		}
		if err := rr.RecordNotReturned(ctx, res.RunID, d, why, final); err != nil {
			log.Warn("the record does not say why the device was not returned", "error", err)
		}
	}
	// usedAfterClean closes the record for a device that may have served
	// a tenant after this run's clean that no scan or claim recorded: the
	// clean no longer counts for it (PreviousTenant), so a scan that finds
	// it un-fenced before a later run cleaned it fences it again, even
	// while that run backs off (review rev5 F3). A tenant write: the
	// re-fence cache's "not held" goes.
	usedAfterClean := func(why string) {
		if recorder {
			if err := rr.RecordUsedAfterClean(ctx, res.RunID, d, why); err != nil {
				log.Warn("the record does not say why the device was not returned, and its clean may still count as the device's last: a scan that finds it un-fenced before a new run cleaned it does not fence it again", "error", err)
			}
		}
		r.forgetTenant(d.RPUUID, d.Address)
	}
	if r.refencedDuringRun(d.RPUUID, false) {
		return r.unfencedDuringRun(log, usedAfterClean, refencedWhy)
	}
	if recorder {
		// Before the PUT: a tenant the store saw on the device during the
		// run had it out of the fence, and Nova's burn fenced it again, so
		// Placement's "nobody holds it now" cannot tell (rev3 H1).
		why, err := rr.UsedSinceStarted(ctx, res.RunID)
		switch {
		case err != nil:
			r.m.unreserves.WithLabelValues("error").Inc()
			log.Error("cleaned device not un-reserved: the claims store cannot say whether another tenant held it during the run; it stays reserved and is retried after a backoff (check the claims database)", "error", err)
			notReturned(fmt.Sprintf("the claims store could not say whether another tenant held the device during the run (%v); retried after a backoff, continuing this record", err), false)
			r.fail(d, gaugeBackoff)
			return ""
		case why != "":
			return r.unfencedDuringRun(log, usedAfterClean, why)
		}
	}
	r.unreserveBegins(d.RPUUID)
	err := r.p.Unreserve(ctx, d, res.RunID)
	if errors.Is(err, placement.ErrStaleReturn) && r.refencedDuringRun(d.RPUUID, false) {
		// Fenced again while the un-reserve ran: that write moved the
		// generation the PUT needed; the operator must hear why.
		return r.unfencedDuringRun(log, usedAfterClean, refencedWhy)
	}
	switch {
	case errors.Is(err, placement.ErrAllocated):
		r.m.unreserves.WithLabelValues("allocated").Inc()
		log.Warn("cleaned device is allocated now; not un-reserved, left alone", "error", err)
		usedAfterClean(fmt.Sprintf("Placement showed an allocation on the device at the un-reserve: %v", err))
		return
	case errors.Is(err, placement.ErrQuarantined):
		// Retired (or quarantined) while its un-reserve was pending: no
		// scan retries it, and the release must clean it afresh, so the
		// record is closed here rather than resumed into an un-reserve.
		r.m.unreserves.WithLabelValues("quarantined").Inc()
		log.Warn("cleaned device is quarantined now (retired by an operator?); not un-reserved, it stays reserved until released, and its release cleans it again", "error", err)
		notReturned("Placement showed the device quarantined at the un-reserve (an operator retired it, or a quarantine is open); it stays reserved, and its release (scourctl placement unquarantine) starts a new cleaning run", true)
		return
	case errors.Is(err, placement.ErrUnreservedElsewhere):
		// In the pool, but not by scour: the record must not claim the
		// un-reserve, and the operator must find the other actor. Nova
		// could have scheduled a tenant on it since the fence was lifted,
		// mid-wipe, and that tenant may have come and gone unseen: the
		// clean covers none of its data (usedAfterClean), so the scan
		// that follows fences the device again and a new run cleans it,
		// as when a scan caught the lifted fence during the run.
		r.m.unreserves.WithLabelValues("elsewhere").Inc()
		r.mu.Lock()
		delete(r.backoff, d.RPUUID)
		r.mu.Unlock()
		log.Warn("device un-reserved by someone else during cleaning: check for another cleaner, e.g. Nova's clean-on-delete sample; it was schedulable while being wiped and may have served a tenant since: the next scan fences it again and a new run cleans it", "error", err)
		usedAfterClean("every required step succeeded, but the device was un-reserved in Placement by someone else during cleaning, not by scour: it was schedulable while being wiped (check for another cleaner, e.g. Nova's clean-on-delete sample) and may have served a tenant since, so a scan fences it again and a new run cleans it")
		return "un-reserved elsewhere during cleaning"
	case errors.Is(err, claims.ErrQuarantineOpen):
		// Retired (or quarantined) in the store during the run, and the
		// retirement's Placement write did not land, so the generation
		// the PUT needs did not move: the store refused to journal the
		// PUT, and nothing was sent. The run was still cleaning when the
		// operator retired the device, so Store.Retire left it open.
		r.m.unreserves.WithLabelValues("quarantined").Inc()
		why := "the claims store holds the device retired or quarantined"
		var qe *claims.QuarantineOpenError
		if errors.As(err, &qe) {
			why += " (" + qe.Quarantine.Reason + ")"
		}
		log.Warn("cleaned device not un-reserved: "+why+"; nothing was sent: it stays reserved until released, and its release cleans it again", "error", err)
		notReturned(why+" at the un-reserve, so no un-reserve was sent; it stays reserved, and its release (scourctl placement unquarantine) starts a new cleaning run", true)
		// A scan sets reserved = total and the trait again when the
		// retirement's own Placement write failed.
		return "retired during cleaning"
	case errors.Is(err, claims.ErrNotCleaned):
		// Closed meanwhile (retired: its release cleans it again; or
		// settled): nothing was sent, nothing to retry or page about.
		log.Info("cleaned device not un-reserved: its run's record was closed meanwhile (retired by an operator, or settled at start); nothing was sent", "error", err)
		return ""
	case errors.Is(err, placement.ErrStaleReturn):
		// The device's provider moved since the all-clear this run's
		// destructive steps started on, or since a PUT of the run that may
		// have landed before scourd stopped: it may have been un-fenced,
		// used by a tenant and burned again. The old clean does not count
		// for that tenant's data; a new run cleans the device again.
		r.m.unreserves.WithLabelValues("stale").Inc()
		log.Warn("cleaned device may have served a tenant since this run's all-clear or un-reserve (its Placement generation moved); not un-reserved: a new run cleans it again", "error", err)
		usedAfterClean(fmt.Sprintf("the device may have served a tenant since (%v), so a new run cleans it again", err))
		return "stale return"
	case err != nil:
		r.m.unreserves.WithLabelValues("error").Inc()
		log.Error("cleaned device could not be un-reserved; it stays reserved and is retried after a backoff (check Placement)", "error", err)
		notReturned(fmt.Sprintf("the un-reserve failed (%v); retried after a backoff, continuing this record", err), false)
		r.fail(d, gaugeBackoff)
		return
	}
	r.m.unreserves.WithLabelValues("ok").Inc()
	r.mu.Lock()
	delete(r.backoff, d.RPUUID)
	r.mu.Unlock()
	if !recorder {
		log.Info("device cleaned and returned to the pool")
		return ""
	}
	switch err := rr.RecordReturned(ctx, res.RunID, d); {
	case err == nil:
		log.Info("device cleaned and returned to the pool")
	case errors.Is(err, claims.ErrNotCleaned):
		// Closed while the PUT was in flight: by an operator's
		// retirement (Store.Retire closes a run waiting for its return,
		// saying its journaled PUT may have returned the device). No
		// settle looks at a closed record; the retirement's Placement
		// write fences the device again (placement.Client.Quarantine
		// waits for this PUT's outcome), and so does a scan if that
		// write failed.
		log.Warn("device un-reserved, but its run's record was closed while the un-reserve was in flight (retired by an operator?): the record says the un-reserve may have returned it; a retirement keeps it reserved (set again by its Placement write or the next scan)", "error", err)
		return "record closed during the un-reserve"
	default:
		log.Error("device returned but its record still says cleaned; scourd settles it from Placement within the hour, or at its next start", "error", err)
	}
	return ""
}

// refencedWhy is what a record says of a run whose device refence fenced
// again while it ran.
const refencedWhy = "a scan found the device below reserved = total while this run cleaned it and fenced it again (refence)"

// refencedDuringRun says whether refence fenced rp again while its run is
// in flight; mark records that it just did (a device with no run in
// flight: false, nothing recorded).
func (r *Reconciler) refencedDuringRun(rp string, mark bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.running[rp]
	if ok && mark {
		q.refenced = true
		r.running[rp] = q
	}
	return ok && q.refenced
}

// unreserveBegins records that rp's run sends its own un-reserve now: a
// scan that finds the device below reserved = total from here on may be
// seeing scour's own return, not someone lifting the fence.
func (r *Reconciler) unreserveBegins(rp string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q, ok := r.running[rp]; ok {
		q.unreserving = true
		r.running[rp] = q
	}
}

// unfencedDuringRun ends a cleaned run whose device was out of its fence
// during the cleaning, why saying how scour knows (another tenant held
// it). It was schedulable while being wiped, as for
// ErrUnreservedElsewhere, and counts as elsewhere; but it is fenced now
// and its data since the erase is nobody's clean: not un-reserved, the
// record closed as cleaned, not returned, its clean no longer the
// device's last (usedAfterClean), and a scan starts a new run.
func (r *Reconciler) unfencedDuringRun(log *slog.Logger, usedAfterClean func(string), why string) (rescan string) {
	r.m.unreserves.WithLabelValues("elsewhere").Inc()
	log.Warn("device left its fence while being cleaned (someone un-reserved it: another cleaner, Cyborg's device enable, an inventory set without --amend); it was schedulable while being wiped; not un-reserved: a new run cleans it again", "reason", why)
	usedAfterClean("every required step succeeded, but the device left its fence during cleaning, not by scour: it was schedulable while being wiped (check for another cleaner, e.g. Nova's clean-on-delete sample); " + why)
	return "unfenced during cleaning"
}

func (r *Reconciler) quarantine(ctx context.Context, log *slog.Logger, d Device, res CleanResult) (rescan string) {
	if err := r.p.Quarantine(ctx, d, res.Detail); err != nil {
		log.Error("device must be quarantined but the trait could not be set; it stays reserved and is retried after a backoff (check Placement)", "detail", res.Detail, "error", err)
		r.fail(d, gaugeBackoff)
		return
	}
	log.Error("device quarantined: it stays reserved until an operator un-quarantines it", "detail", res.Detail)
	if qr, ok := r.cl.(QuarantineRecorder); ok {
		if err := qr.RecordQuarantined(ctx, res.RunID, d, res.Detail); err != nil {
			log.Warn("device quarantined but its record was not closed as quarantined", "error", err)
		}
	}
	// scour_lifecycle_devices{state="quarantined"} pages a human: a scan
	// now shows it, rather than the next periodic one minutes later.
	return "quarantined"
}

// fail puts the device in exponential backoff (BackoffBase doubling up to
// BackoffMax, ±20% jitter) so a persistently failing device isn't hammered.
func (r *Reconciler) fail(d Device, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backoff[d.RPUUID]
	b.failures++
	wait := r.cfg.BackoffBase
	for i := 1; i < b.failures && wait < r.cfg.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, r.cfg.BackoffMax)
	wait += time.Duration((rand.Float64()*0.4 - 0.2) * float64(wait))
	b.until, b.why = r.now().Add(wait), why
	r.backoff[d.RPUUID] = b
	select {
	case r.rearm <- struct{}{}:
	default:
	}
}
