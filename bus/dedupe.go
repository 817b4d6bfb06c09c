package bus

import (
	"context"
	"sync"
)

// recent remembers the commands handled successfully lately, and the ones
// being handled, so a redelivery (the ack was lost with the connection, or
// the dispatcher republished a redelivered notification) does not run the
// handler twice. A redelivery that arrives while the first copy is still
// being handled waits for its outcome: acking it early would lose the
// command if the first attempt then failed on a dead channel. It is an
// optimisation over idempotent handlers, not a guarantee across restarts.
type recent struct {
	mu       sync.Mutex
	inflight map[string]*attempt
	done     map[string]struct{}
	ring     []string
	next     int
}

type attempt struct {
	finished chan struct{}
	ok       bool
}

func newRecent(n int) *recent {
	return &recent{inflight: map[string]*attempt{}, done: make(map[string]struct{}, n), ring: make([]string, n)}
}

// begin returns owned=true when the caller must handle key (and then call
// end), or owned=false when key was already handled successfully. It waits
// while another delivery of key is being handled.
func (r *recent) begin(ctx context.Context, key string) (owned bool, err error) {
	for {
		r.mu.Lock()
		if _, ok := r.done[key]; ok {
			r.mu.Unlock()
			return false, nil
		}
		a, busy := r.inflight[key]
		if !busy {
			r.inflight[key] = &attempt{finished: make(chan struct{})}
			r.mu.Unlock()
			return true, nil
		}
		r.mu.Unlock()
		select {
		case <-a.finished:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// end records the outcome of the attempt begin handed out.
func (r *recent) end(key string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.inflight[key]
	delete(r.inflight, key)
	if ok {
		if old := r.ring[r.next]; old != "" {
			delete(r.done, old)
		}
		r.ring[r.next] = key
		r.done[key] = struct{}{}
		r.next = (r.next + 1) % len(r.ring)
	}
	if a != nil {
		a.ok = ok
		close(a.finished)
	}
}
