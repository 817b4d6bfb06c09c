package bus

import "sync"

// recent remembers the keys of the last n commands handled successfully,
// so a redelivery (the ack was lost with the connection, or the dispatcher
// republished a redelivered notification) is acked without running the
// handler twice. It is an optimisation over idempotent handlers, not a
// guarantee across restarts.
type recent struct {
	mu   sync.Mutex
	keys map[string]struct{}
	ring []string
	next int
}

func newRecent(n int) *recent {
	return &recent{keys: make(map[string]struct{}, n), ring: make([]string, n)}
}

func (r *recent) seen(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	return ok
}

func (r *recent) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[key]; ok {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.keys, old)
	}
	r.ring[r.next] = key
	r.keys[key] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}
