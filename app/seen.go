package app

import (
	"sync"

	"github.com/scour-project/scour/placement"
)

// seenDevices keeps each device's latest Placement read, shared by the
// handlers' gate and the pipeline's pre-destructive check, so the check
// confirms an earlier read with one call and the un-reserve writes at the
// generation the check saw (placement/seen.go). An old entry is never
// trusted: every use re-proves it by its generation.
type seenDevices struct {
	mu sync.Mutex
	m  map[string]placement.Device
}

func newSeenDevices() *seenDevices { return &seenDevices{m: map[string]placement.Device{}} }

func (s *seenDevices) put(d placement.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[d.UUID] = d
}

func (s *seenDevices) get(rp string) (placement.Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.m[rp]
	return d, ok
}

// take returns and forgets the device's read: after an un-reserve or a
// quarantine it is out of date by construction.
func (s *seenDevices) take(rp string) (placement.Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.m[rp]
	delete(s.m, rp)
	return d, ok
}
