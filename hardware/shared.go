package hardware

import (
	"context"
	"sync"
)

// sharedRun runs one tool at a time for many callers (a group commit):
// a caller only ever gets the output of a run that began after it asked.
// Callers arriving while a run is under way wait for the next one, which
// begins when that one ends and serves all of them; the output of a run
// already under way is never handed to a later caller, since what it
// lists may predate the caller's reason to ask (a drive just bound to
// nvme, a namespace just created). Errors are shared the same way.
//
// Runs happen on their own goroutine under context.Background(): a
// run serves every caller that joined it, so the one that happened to
// start it going away must not cancel it for the others. run bounds
// itself (Real.tool's per-tool timeout), so a run nobody waits for any
// more still ends; a caller whose ctx ends just stops waiting.
type sharedRun struct {
	mu      sync.Mutex
	pending *sharedResult // not begun: every caller joined before it begins
	running bool          // a goroutine is running runs
	asked   int           // callers so far (tests wait on it)
}

type sharedResult struct {
	run  func(context.Context) ([]byte, error)
	done chan struct{}
	out  []byte // shared: callers must not modify it
	err  error
}

// next returns the output of a run of run that begins after this call.
func (s *sharedRun) next(ctx context.Context, run func(context.Context) ([]byte, error)) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.asked++
	b := s.pending
	if b == nil {
		b = &sharedResult{run: run, done: make(chan struct{})}
		s.pending = b
	}
	if !s.running {
		s.running = true
		go s.loop()
	}
	s.mu.Unlock()
	select {
	case <-b.done:
		return b.out, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loop runs the pending run, one at a time, until none is pending.
func (s *sharedRun) loop() {
	for {
		s.mu.Lock()
		b := s.pending
		s.pending = nil // from here on, callers join the next run
		if b == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		b.out, b.err = b.run(context.Background())
		close(b.done)
	}
}
