package handlerstest

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/pipeline"
	"sync"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
)

// Cleaner records every run and measures concurrency. Without CleanF it
// behaves as the real engine does at its allocation check: aborted when W
// shows the device allocated, else clean.
type Cleaner struct {
	W      *World
	CleanF func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error)
	// OnClean, when set, is told of each clean verdict, CleanF's too,
	// before it is returned (Claims.Cleaned: the store's clean record).
	OnClean func(rp string)
	// OnUsedAfterClean, when set, is told of each run closed by
	// RecordUsedAfterClean (Claims.UsedAfterClean: its clean no longer
	// counts).
	OnUsedAfterClean func(rp string)
	// UsedF, when set, answers UsedSinceStarted (default: nobody).
	UsedF func(runID string) (string, error)

	mu          sync.Mutex
	calls       []handlers.CleanRequest
	inFlight    map[string]int
	cur, maxCur int
	overlaps    int // runs started while the same device had one in flight
	returned    []string
	notReturned []string
	usedAfter   []string
	quarantined []string
	closed      map[string]bool // runs CloseRun closed
}

var (
	_ handlers.Cleaner            = (*Cleaner)(nil)
	_ handlers.ReturnRecorder     = (*Cleaner)(nil)
	_ handlers.QuarantineRecorder = (*Cleaner)(nil)
)

func (c *Cleaner) Clean(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
	c.mu.Lock()
	if c.inFlight == nil {
		c.inFlight = map[string]int{}
	}
	rp := req.Device.RPUUID
	if c.inFlight[rp] > 0 {
		c.overlaps++
	}
	c.inFlight[rp]++
	c.cur++
	c.maxCur = max(c.maxCur, c.cur)
	c.calls = append(c.calls, req)
	n := len(c.calls)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight[rp]--
		c.cur--
		c.mu.Unlock()
	}()
	if c.CleanF != nil {
		res, err := c.CleanF(ctx, req)
		if err == nil && res.Verdict == pipeline.VerdictClean && c.OnClean != nil {
			c.OnClean(rp) // the engine stores every clean verdict (rule 1)
		}
		return res, err
	}
	if c.W != nil && c.W.Device(rp).InUse() {
		return handlers.CleanResult{Verdict: pipeline.VerdictAborted, RunID: fmt.Sprint("run-", n)}, nil
	}
	if c.OnClean != nil {
		c.OnClean(rp)
	}
	return handlers.CleanResult{Verdict: pipeline.VerdictClean, RunID: fmt.Sprint("run-", n)}, nil
}

func (c *Cleaner) RecordReturned(ctx context.Context, runID string, d handlers.Device) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed[runID] {
		return fmt.Errorf("claims: mark cleaning run %s returned: %w: it is cleaned (closed)", runID, claims.ErrNotCleaned)
	}
	c.returned = append(c.returned, runID)
	return nil
}

// CloseRun closes runID as cleaned, not returned, from outside its
// reconciler, as claims.Store.Retire closes a run waiting for its return:
// a later RecordReturned of it is claims.ErrNotCleaned.
func (c *Cleaner) CloseRun(runID, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == nil {
		c.closed = map[string]bool{}
	}
	c.closed[runID] = true
	c.notReturned = append(c.notReturned, fmt.Sprintf("%s closed: %s", runID, why))
}

func (c *Cleaner) RecordNotReturned(ctx context.Context, runID string, d handlers.Device, why string, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notReturned = append(c.notReturned, fmt.Sprintf("%s final=%t: %s", runID, final, why))
	return nil
}

func (c *Cleaner) RecordUsedAfterClean(ctx context.Context, runID string, d handlers.Device, why string) error {
	c.mu.Lock()
	c.notReturned = append(c.notReturned, fmt.Sprintf("%s final=true: %s", runID, why))
	c.usedAfter = append(c.usedAfter, runID)
	c.mu.Unlock()
	if c.OnUsedAfterClean != nil {
		c.OnUsedAfterClean(d.RPUUID)
	}
	return nil
}

func (c *Cleaner) UsedSinceStarted(ctx context.Context, runID string) (string, error) {
	if c.UsedF != nil {
		return c.UsedF(runID)
	}
	return "", nil
}

// NotReturned lists the runs told why their device was not returned.
func (c *Cleaner) NotReturned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notReturned...)
}

// UsedAfterClean lists the runs closed by RecordUsedAfterClean (also in
// NotReturned).
func (c *Cleaner) UsedAfterClean() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.usedAfter...)
}

func (c *Cleaner) RecordQuarantined(ctx context.Context, runID string, d handlers.Device, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quarantined = append(c.quarantined, runID)
	return nil
}

// Calls returns the runs started, in order.
func (c *Cleaner) Calls() []handlers.CleanRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]handlers.CleanRequest(nil), c.calls...)
}

// CallsFor counts runs started for rp.
func (c *Cleaner) CallsFor(rp string) int {
	n := 0
	for _, r := range c.Calls() {
		if r.Device.RPUUID == rp {
			n++
		}
	}
	return n
}

// MaxConcurrent is the most runs ever in flight together.
func (c *Cleaner) MaxConcurrent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxCur
}

// Overlaps counts runs started for a device that already had one.
func (c *Cleaner) Overlaps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overlaps
}

// Returned and Quarantined list the run ids closed through the recorders.
func (c *Cleaner) Returned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.returned...)
}

func (c *Cleaner) Quarantined() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.quarantined...)
}
