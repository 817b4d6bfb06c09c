package handlerstest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
)

type hardwareAddress = hardware.Address

// Claims is an in-memory claims store of one host. Fail, when set, is
// asked before every operation (op is the method name) and its error
// returned instead.
type Claims struct {
	Fail func(op string) error
	Now  func() time.Time

	mu     sync.Mutex
	claims map[string]*handlers.Claim
	order  []string
	writes int
}

var _ handlers.Claims = (*Claims)(nil)

// NewClaims returns an empty store.
func NewClaims() *Claims { return &Claims{claims: map[string]*handlers.Claim{}} }

func (s *Claims) fail(op string) error {
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil
}

func (s *Claims) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// All returns every claim, oldest first.
func (s *Claims) All() []handlers.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]handlers.Claim, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, clone(s.claims[id]))
	}
	return out
}

// Get returns the claim of instance on rp.
func (s *Claims) Get(instance, rp string) (handlers.Claim, bool) {
	for _, c := range s.All() {
		if c.InstanceUUID == instance && c.DeviceRP == rp {
			return c, true
		}
	}
	return handlers.Claim{}, false
}

// Writes counts state-changing calls.
func (s *Claims) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func clone(c *handlers.Claim) handlers.Claim {
	out := *c
	out.Volumes.IDs = slices.Clone(c.Volumes.IDs)
	return out
}

func (s *Claims) RecordClaim(ctx context.Context, c handlers.Claim) error {
	if err := s.fail("RecordClaim"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := fmt.Sprintf("%s/%s/%t", c.InstanceUUID, c.DeviceRP, c.ResizeTarget)
	now := s.now()
	if old, ok := s.claims[id]; ok {
		if old.State == handlers.ClaimActive {
			return nil // a replay changes nothing
		}
		c.CreatedAt = old.CreatedAt
	} else {
		s.order = append(s.order, id)
		c.CreatedAt = now
	}
	c.ID, c.State, c.UpdatedAt = id, handlers.ClaimActive, now
	c.Volumes.IDs = slices.Clone(c.Volumes.IDs)
	s.claims[id] = &c
	s.writes++
	return nil
}

func (s *Claims) ClaimsForInstance(ctx context.Context, instance string) ([]handlers.Claim, error) {
	if err := s.fail("ClaimsForInstance"); err != nil {
		return nil, err
	}
	var out []handlers.Claim
	for _, c := range s.All() {
		if c.InstanceUUID == instance {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *Claims) SetClaimState(ctx context.Context, id string, state handlers.ClaimState, reason string) error {
	if err := s.fail("SetClaimState"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[id]
	if !ok {
		return fmt.Errorf("claim %s not found", id)
	}
	if c.State != state {
		c.State, c.UpdatedAt = state, s.now()
		s.writes++
	}
	return nil
}

func (s *Claims) UpdateVolumes(ctx context.Context, instance string, fn func(*handlers.Volumes)) error {
	if err := s.fail("UpdateVolumes"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.claims {
		if c.InstanceUUID == instance && (c.State == handlers.ClaimActive || c.State == handlers.ClaimDormant) {
			fn(&c.Volumes)
			s.writes++
		}
	}
	return nil
}

func (s *Claims) OpenClaims(ctx context.Context) ([]handlers.Claim, error) {
	if err := s.fail("OpenClaims"); err != nil {
		return nil, err
	}
	var out []handlers.Claim
	for _, c := range s.All() {
		if c.State == handlers.ClaimActive || c.State == handlers.ClaimDormant {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *Claims) LatestClaimForDevice(ctx context.Context, rp string) (handlers.Claim, bool, error) {
	if err := s.fail("LatestClaimForDevice"); err != nil {
		return handlers.Claim{}, false, err
	}
	all := s.All()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].DeviceRP == rp {
			return all[i], true, nil
		}
	}
	return handlers.Claim{}, false, nil
}
