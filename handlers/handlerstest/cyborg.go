package handlerstest

import (
	"context"
	"slices"
	"sync"

	"github.com/scour-project/scour/handlers"
)

// Accelerators is an in-memory Cyborg: ARQs by instance. Fail, when set,
// is returned by every read (Cyborg unreachable).
type Accelerators struct {
	mu    sync.Mutex
	arqs  map[string][]handlers.ARQ
	fail  error
	reads int
}

var _ handlers.Accelerators = (*Accelerators)(nil)

// Bind gives instance its ARQs (Nova's bind through Cyborg).
func (a *Accelerators) Bind(instance string, arqs ...handlers.ARQ) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.arqs == nil {
		a.arqs = map[string][]handlers.ARQ{}
	}
	a.arqs[instance] = slices.Clone(arqs)
}

// Delete drops instance's ARQs (Nova releasing its accelerators).
func (a *Accelerators) Delete(instance string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.arqs, instance)
}

// SetFail makes every read fail with err (nil: answer again).
func (a *Accelerators) SetFail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = err
}

// Reads counts InstanceARQs calls.
func (a *Accelerators) Reads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

func (a *Accelerators) InstanceARQs(ctx context.Context, instance string) ([]handlers.ARQ, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads++
	if a.fail != nil {
		return nil, a.fail
	}
	return slices.Clone(a.arqs[instance]), nil
}

var _ handlers.ARQStore = (*Claims)(nil)

// RecordARQ keeps the first record of (instance, device).
func (s *Claims) RecordARQ(ctx context.Context, r handlers.ARQRecord) error {
	if err := s.fail("RecordARQ"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.arqs, func(x handlers.ARQRecord) bool { return x.Instance == r.Instance && x.DeviceRP == r.DeviceRP }) {
		return nil
	}
	s.arqs = append(s.arqs, r)
	return nil
}

func (s *Claims) ARQRecorded(ctx context.Context, instance, rp string) (bool, error) {
	if err := s.fail("ARQRecorded"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.arqs, func(x handlers.ARQRecord) bool { return x.Instance == instance && x.DeviceRP == rp }), nil
}

// ARQRecords returns every ARQ record, in the order written.
func (s *Claims) ARQRecords() []handlers.ARQRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.arqs)
}
