package handlers

import (
	"context"
	"errors"
	"github.com/scour-project/scour/placement"
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
	mark := r.mark()
	var fresh []Device
	for _, d := range devs {
		f, err := r.p.ReadDevice(ctx, d)
		switch {
		case errors.Is(err, placement.ErrNotFound):
			continue
		case err != nil:
			r.log.Warn("cannot read a released device; a scan looks at it instead", "device", d.RPName, "trigger", reason, "error", err)
			rescan = true
			continue
		}
		fresh = append(fresh, f)
	}
	return r.queueRead(ctx, fresh, mark, reason) || rescan
}

// mark stamps a read of Placement as it begins: runs that end after it
// are newer than the read (see Reconciler.finished), and so are reads
// that begin after it (see Reconciler.reads).
func (r *Reconciler) mark() readMark {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	return readMark{seq: r.seq, read: r.reads}
}

// queueRead is CheckDevices for devices read after mark. A device the
// store holds quarantined (a cleaning verdict, or retired) is not queued:
// a one-device read does not see the quarantine trait, and cleaning it
// would only quarantine it again (counted and logged twice) or open a run
// that ends aborted. A scan sets any lost trait again (rescan asks for
// one).
func (r *Reconciler) queueRead(ctx context.Context, fresh []Device, snapshot readMark, reason string) (rescan bool) {
	now := r.now()
	var toBurn []Device
	var open map[string]OpenQuarantine
	openRead := false
	for _, d := range fresh {
		r.mu.Lock()
		act := r.classifyLocked(d, nil, snapshot, now, map[string]int{}) // counts unused: no gauge
		r.mu.Unlock()
		if d.InUse() {
			rescan = true
		}
		switch act {
		case actBurn:
			toBurn = append(toBurn, d)
		case actClean:
			if !openRead {
				var err error
				if open, err = r.openQuarantines(ctx); err != nil {
					// The cleaner asks the store again before it runs.
					r.log.Warn("cannot read the store's quarantines; released devices are queued regardless", "error", err)
				}
				openRead = true
			}
			if q, held := open[d.RPUUID]; held {
				r.log.Info("released device is quarantined in the store; not cleaned, left to the scan", "device", d.RPName, "rp", d.RPUUID, "reason", q.Reason)
				rescan = true
				continue
			}
			if r.present(ctx, d) {
				r.enqueue(d, reason, snapshot, now)
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
