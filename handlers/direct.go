package handlers

import (
	"context"
	"errors"
	"time"
)

// CheckDevices reads exactly the devices a release freed and queues the
// dirty ones at once: no scan of the whole tree, no debounce. The read
// is one device each; the cleaner's check before its first destructive
// step and the un-reserve's generation guard stay the safety (rule 2).
//
// It reports whether a scan is still wanted: a device could not be read,
// or Placement still shows it allocated (a move's migration allocation
// that Nova removes shortly after its notification: the triggered scan
// schedules its follow-up, which sees the device freed).
func (r *Reconciler) CheckDevices(ctx context.Context, devs []Device, reason string) (rescan bool) {
	r.mu.Lock()
	snapshot := r.seq // runs that end after this are newer than the reads
	r.mu.Unlock()
	now := r.now()
	var toBurn []Device
	for _, d := range devs {
		fresh, err := r.p.ReadDevice(ctx, d)
		switch {
		case errors.Is(err, ErrGone):
			continue
		case err != nil:
			r.log.Warn("cannot read a released device; a scan looks at it instead", "device", d.RPName, "trigger", reason, "error", err)
			rescan = true
			continue
		}
		r.mu.Lock()
		act := r.classifyLocked(fresh, snapshot, now, map[string]int{})
		r.mu.Unlock()
		if fresh.InUse() {
			rescan = true
		}
		switch act {
		case actBurn:
			toBurn = append(toBurn, fresh)
		case actClean:
			if r.present(ctx, fresh) {
				r.enqueue(fresh, reason, snapshot, now)
			}
		}
	}
	for _, d := range toBurn {
		if err := r.burn(ctx, d); err != nil {
			r.log.Warn("burn failed; the next scan retries", "device", d.RPName, "error", err)
		}
	}
	r.kickDispatch()
	return rescan
}

// kickDispatch asks Run to start workers for what is queued. Workers run
// under Run's context, never under a command's.
func (r *Reconciler) kickDispatch() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// debounce is the burst window: a trigger within it of the last triggered
// scan waits for the window's end, and everything that arrived meanwhile
// is merged into one scan. 0: every trigger scans at once.
func (r *Reconciler) debounce(last time.Time) time.Duration {
	if r.cfg.ScanDebounce == nil || last.IsZero() {
		return 0
	}
	return *r.cfg.ScanDebounce - time.Since(last)
}
