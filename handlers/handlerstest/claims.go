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

// Claims is an in-memory claims store of one host with the semantics of
// claims.Store: one live claim per (instance, ResizeTarget) that gains
// devices, idempotent transitions, an orphan sweep over active claims
// older than Expiry (from creation or reactivation). Fail, when set, is
// asked before every operation (op is the method name) and its error
// returned instead.
type Claims struct {
	Fail   func(op string) error
	Now    func() time.Time
	Expiry time.Duration // claim_expiry_time; 0 means 300s

	mu     sync.Mutex
	claims []*entry
	seq    int
}

type entry struct {
	handlers.Claim
	since time.Time // creation or reactivation: the sweep's age
}

var _ handlers.Claims = (*Claims)(nil)

// NewClaims returns an empty store.
func NewClaims() *Claims { return &Claims{} }

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
	out := make([]handlers.Claim, 0, len(s.claims))
	for _, e := range s.claims {
		out = append(out, clone(e.Claim))
	}
	return out
}

// ForDevice returns the newest claim of instance holding rp.
func (s *Claims) ForDevice(instance, rp string) (handlers.Claim, bool) {
	all := s.All()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].InstanceUUID == instance && all[i].HasDevice(rp) {
			return all[i], true
		}
	}
	return handlers.Claim{}, false
}

func clone(c handlers.Claim) handlers.Claim {
	c.Devices = slices.Clone(c.Devices)
	c.Volumes.Attached = slices.Clone(c.Volumes.Attached)
	return c
}

func (s *Claims) RecordClaim(ctx context.Context, c handlers.Claim) error {
	if err := s.fail("RecordClaim"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, e := range s.claims {
		if e.InstanceUUID == c.InstanceUUID && e.ResizeTarget == c.ResizeTarget && e.Live() {
			for _, d := range c.Devices {
				if !e.HasDevice(d.RPUUID) {
					e.Devices = append(e.Devices, d)
					e.UpdatedAt = now
				}
			}
			return nil
		}
	}
	s.seq++
	c = clone(c)
	c.ID, c.State, c.CreatedAt, c.UpdatedAt = fmt.Sprint("claim-", s.seq), handlers.ClaimActive, now, now
	s.claims = append(s.claims, &entry{Claim: c, since: now})
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

// transition moves the instance's claims matching match to state.
func (s *Claims) transition(op, instance string, match func(*entry) bool, state handlers.ClaimState) error {
	if err := s.fail(op); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, e := range s.claims {
		if e.InstanceUUID == instance && match(e) {
			if state == handlers.ClaimActive {
				e.since = now
			}
			e.State, e.UpdatedAt = state, now
		}
	}
	return nil
}

func (s *Claims) ReleaseClaim(ctx context.Context, instance string, resizeTarget bool, reason, messageID string) error {
	return s.transition("ReleaseClaim", instance, func(e *entry) bool { return e.Live() && e.ResizeTarget == resizeTarget },
		handlers.ClaimReleased)
}

func (s *Claims) MarkDormant(ctx context.Context, instance, messageID string) error {
	return s.transition("MarkDormant", instance, func(e *entry) bool { return e.State == handlers.ClaimActive },
		handlers.ClaimDormant)
}

func (s *Claims) Reactivate(ctx context.Context, instance, messageID string) error {
	return s.transition("Reactivate", instance, func(e *entry) bool { return e.State == handlers.ClaimDormant },
		handlers.ClaimActive)
}

func (s *Claims) UpdateVolumes(ctx context.Context, instance string, fn func(*handlers.Volumes)) error {
	if err := s.fail("UpdateVolumes"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []*entry
	for _, e := range s.claims {
		if e.InstanceUUID == instance && e.Live() {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		return nil
	}
	v := live[0].Volumes
	v.Attached = slices.Clone(v.Attached)
	fn(&v)
	for _, e := range live {
		e.Volumes = v
		e.Volumes.Attached = slices.Clone(v.Attached)
	}
	return nil
}

func (s *Claims) LiveClaims(ctx context.Context) ([]handlers.Claim, error) {
	if err := s.fail("LiveClaims"); err != nil {
		return nil, err
	}
	var out []handlers.Claim
	for _, c := range s.All() {
		if c.Live() {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *Claims) SweepOrphans(ctx context.Context, backed func(context.Context, string) (bool, error)) (int, error) {
	if err := s.fail("SweepOrphans"); err != nil {
		return 0, err
	}
	expiry := s.Expiry
	if expiry == 0 {
		expiry = 300 * time.Second
	}
	s.mu.Lock()
	var old []*entry
	for _, e := range s.claims {
		if e.State == handlers.ClaimActive && s.now().Sub(e.since) >= expiry {
			old = append(old, e)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, e := range old {
		ok, err := backed(ctx, e.InstanceUUID)
		if err != nil {
			return n, err
		}
		if !ok {
			s.mu.Lock()
			e.State, e.UpdatedAt = handlers.ClaimOrphaned, s.now()
			s.mu.Unlock()
			n++
		}
	}
	return n, nil
}

func (s *Claims) LastClaimForDevice(ctx context.Context, rp string) (handlers.Claim, bool, error) {
	if err := s.fail("LastClaimForDevice"); err != nil {
		return handlers.Claim{}, false, err
	}
	all := s.All()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].HasDevice(rp) {
			return all[i], true, nil
		}
	}
	return handlers.Claim{}, false, nil
}
