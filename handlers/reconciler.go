package handlers

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
)

// Reconciler is level-triggered and the source of truth: it reads this
// host's Placement tree and drives every device toward its end state,
// whatever notifications were missed, duplicated or reordered. It scans on
// start, after triggers (at once; a burst within ScanDebounce of a
// triggered scan is merged into one more scan), once more FollowUpDelay after a triggered scan, and every
// ReconcileInterval (jittered), earlier when a device's backoff ends.
//
// Cleaning runs asynchronously, at most MaxConcurrentCleans at a time and
// never two for one device; a scan only queues dirty devices, so neither a
// scan nor Handle ever waits for a clean.
type Reconciler struct {
	cfg     Config
	p       Placement
	c       Claims
	hw      Hardware
	cl      Cleaner
	arq     *arqs // nil: Cyborg's ARQs are not read
	m       *metrics
	log     *slog.Logger
	now     func() time.Time
	onStuck func(Device, time.Duration)

	trigger chan string   // capacity 1: a full channel is the "dirty" flag
	rearm   chan struct{} // capacity 1: a backoff changed, recompute the timer
	kick    chan struct{} // capacity 1: devices were queued outside a scan
	scanMu  sync.Mutex    // one scan at a time
	wg      sync.WaitGroup

	mu      sync.Mutex
	pending map[string]queued // RP UUID → device waiting for a worker
	order   []string          // FIFO of pending RP UUIDs
	running map[string]queued // RP UUID → run in flight
	backoff map[string]backoff
	// finished stamps each device's last run end with a sequence number
	// (seq), so a scan whose Placement snapshot was read before that end
	// leaves the device to the next scan instead of acting on a stale view
	// (the run may have just quarantined or returned it).
	seq      uint64
	finished map[string]uint64
	// reads numbers each read of Placement as it begins (readMark.read):
	// a read that began before a device was queued from another read may
	// be older than what queued it, and does not drop it from the queue
	// (a scan that read a device still allocated just before its release
	// would otherwise undo the release's newer read).
	reads   uint64
	holders map[string]string // RP UUID → consumer last written with SawHolder
	// addresses: RP UUID → address last written with SawAddress;
	// orphans: the open quarantines the last scan found orphaned.
	addresses map[string]hardware.Address
	orphans   map[string]bool
	// notHeld: devices refence found held by no tenant since their last
	// clean (tenantcache.go); tenantEpoch counts the tenant writes that
	// dropped entries; refenced: a scan has run refence.
	notHeld     map[string]notHeld
	tenantEpoch uint64
	refenced    bool
}

type queued struct {
	dev     Device
	trigger string
	since   time.Time
	read    uint64 // the newest read that queued it (readMark.read)
	// refenced: while this run was in flight, a scan found the device
	// below reserved = total and fenced it again (refence): someone
	// un-reserved it mid-clean, so the run must not report a return.
	refenced bool
	// unreserving: the run's own un-reserve has begun, so the device
	// below reserved = total may be its doing (refence leaves it alone).
	unreserving bool
}

// readMark stamps a read of Placement as it begins: seq orders it against
// run ends (Reconciler.finished), read against other reads (Reconciler.reads).
type readMark struct{ seq, read uint64 }

type backoff struct {
	failures int
	until    time.Time
	why      string // scour's own state shown in the devices gauge
}

func newReconciler(cfg Config, d Deps, m *metrics, log *slog.Logger) *Reconciler {
	return &Reconciler{cfg: cfg, p: d.Placement, c: d.Claims, hw: d.Hardware, cl: d.Cleaner, arq: newARQs(cfg, d, m), m: m,
		log: log.With("component", "reconciler"), now: d.Now, onStuck: d.OnStuck,
		trigger: make(chan string, 1), rearm: make(chan struct{}, 1), kick: make(chan struct{}, 1), pending: map[string]queued{}, running: map[string]queued{},
		backoff: map[string]backoff{}, finished: map[string]uint64{}, holders: map[string]string{},
		addresses: map[string]hardware.Address{}, notHeld: map[string]notHeld{}}
}

// Trigger asks for a scan soon. It never blocks; triggers that arrive
// while one is already pending are merged into it.
func (r *Reconciler) Trigger(reason string) {
	select {
	case r.trigger <- reason:
	default:
	}
}

// RunMark is what the reconciler knows of one device's cleaning runs at
// one moment: whether one is in flight, the stamp of the last one's end
// (Reconciler.finished), and until when it backs off after a failed run
// (zero: it does not).
type RunMark struct {
	Running      bool
	Ended        uint64
	BackoffUntil time.Time
}

// RanDuring says whether a run of the device was in flight at before, at
// after, or ended between them (RunMarks of one device, before taken
// first): only then could an un-reserve PUT of this scourd's have been
// in flight in between (save one an earlier run sent and never got an
// answer to, which its record keeps as possibly landed).
func RanDuring(before, after RunMark) bool {
	return before.Running || after.Running || before.Ended != after.Ended
}

// RunMark returns the device rp's RunMark now.
func (r *Reconciler) RunMark(rp string) RunMark {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, running := r.running[rp]
	m := RunMark{Running: running, Ended: r.finished[rp]}
	if b, ok := r.backoff[rp]; ok && r.now().Before(b.until) {
		m.BackoffUntil = b.until
	}
	return m
}

// SettledReturns is told what claims.Store.SettleReturns did. The
// devices it found un-reserved by someone else outside an un-reserve of
// scour's (scour never sent its PUT) are counted on the counter the
// un-reserve itself uses (unreserves_total{result="elsewhere"}), which
// ScourUnreservedElsewhere alerts on. Every run it closed (those, and
// devices it found allocated) was closed as possibly used after its
// clean: a tenant may have come and gone unseen, and the clean no longer
// counts. That is a tenant write this process did not make and cannot
// name the devices of: every cached "not held" goes (tenantcache.go), and
// a scan follows, which fences again such a device found free and
// un-fenced, so that a new run cleans it (the hourly settle's case; at
// start-up the first scan asks the store about every device anyway).
func (r *Reconciler) SettledReturns(n claims.Settled) {
	if n.Elsewhere > 0 {
		r.m.unreserves.WithLabelValues("elsewhere").Add(float64(n.Elsewhere))
	}
	if n.Closed > 0 {
		r.forgetAllTenants()
		r.Trigger("cleaned records settled as possibly used")
	}
}

// Run scans until ctx is done, then waits for in-flight cleans (which see
// the same ctx cancelled; the cleaner resumes them from their checkpoint
// on the next start).
func (r *Reconciler) Run(ctx context.Context) error {
	defer r.wg.Wait()
	// failed counts the scans that failed in a row: the next one comes
	// after ScanRetry, doubled for each further failure, not after a
	// whole interval.
	failed := r.scan(ctx, "start", 0)
	periodic := time.NewTimer(r.nextDelay(failed))
	defer periodic.Stop()
	var followUp <-chan time.Time
	var lastTriggered time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
			r.dispatch(ctx)
		case reason := <-r.trigger:
			if wait := r.debounce(lastTriggered); wait > 0 {
				if !sleep(ctx, wait) {
					return nil
				}
				select { // merge triggers that arrived while debouncing
				case <-r.trigger:
				default:
				}
			}
			failed = r.scan(ctx, reason, failed)
			lastTriggered = time.Now()
			if r.cfg.FollowUpDelay > 0 && followUp == nil {
				followUp = time.After(r.cfg.FollowUpDelay)
			}
		case <-followUp:
			followUp = nil
			failed = r.scan(ctx, "follow-up", failed)
		case <-periodic.C:
			reason := "interval"
			if failed > 0 {
				reason = "retry"
			}
			failed = r.scan(ctx, reason, failed)
		case <-r.rearm: // a device's backoff may now end before the timer
		}
		periodic.Reset(r.nextDelay(failed))
	}
}

// scan scans and returns the number of scans failed in a row: 0 after a
// success, failed+1 after a failure.
func (r *Reconciler) scan(ctx context.Context, reason string, failed int) int {
	err := r.Scan(ctx, reason)
	if err == nil {
		return 0
	}
	if ctx.Err() == nil {
		r.log.Warn("scan failed; retrying it sooner than the interval", "trigger", reason, "failed_in_a_row", failed+1,
			"retry_in", r.retryDelay(failed+1).Round(time.Second), "error", err)
	}
	return failed + 1
}

// retryDelay is the wait after the failed-th scan failed in a row:
// ScanRetry doubled for each earlier failure, at most ReconcileInterval.
func (r *Reconciler) retryDelay(failed int) time.Duration {
	d := r.cfg.ScanRetry
	for i := 1; i < failed && d < r.cfg.ReconcileInterval; i++ {
		d *= 2
	}
	return min(d, r.cfg.ReconcileInterval)
}

// nextDelay is the jittered interval, or after failed scans in a row the
// shorter retryDelay, shortened to the earliest end of a device's backoff.
func (r *Reconciler) nextDelay(failed int) time.Duration {
	d := r.cfg.ReconcileInterval
	if failed > 0 {
		d = r.retryDelay(failed)
	}
	d += time.Duration((rand.Float64()*2 - 1) * r.cfg.ReconcileJitter * float64(d))
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.backoff {
		if w := b.until.Sub(now); w > 0 && w < d {
			d = w
		}
	}
	return max(d, time.Millisecond)
}

// WaitIdle waits until no clean is queued or running (tests, scourctl).
func (r *Reconciler) WaitIdle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		idle := len(r.pending) == 0 && len(r.running) == 0
		r.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
