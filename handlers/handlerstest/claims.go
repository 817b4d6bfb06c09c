package handlerstest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/scour-project/scour/claims"
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

	mu          sync.Mutex
	claims      []*entry
	seq         int
	holders     map[string]holder
	quarantines map[string]handlers.OpenQuarantine // by RP UUID, open ones
	cleans      map[string][]int                   // s.seq at each device's clean verdicts that count, oldest first
	used        map[string]int                     // s.seq at each device's newest clean closed by UsedAfterClean
	retired     map[string]int                     // s.seq at each retirement, or its last retirement run
	arqs        []handlers.ARQRecord
	deleted     map[string]string          // instance -> message id of its delete
	addresses   map[string]hardwareAddress // RP UUID → address SawAddress recorded
}

type entry struct {
	handlers.Claim
	since time.Time // creation or reactivation: the sweep's age
	order int       // s.seq at creation: orders claims and holders seen
}

type holder struct {
	consumer string
	seq      int
}

var (
	_ handlers.Claims           = (*Claims)(nil)
	_ handlers.QuarantineLister = (*Claims)(nil)
	_ handlers.RetirementWiper  = (*Claims)(nil)
)

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
	s.claims = append(s.claims, &entry{Claim: c, since: now, order: s.seq})
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

// SawHolderAt is SawHolder: this fake orders holders by sequence, not
// by time.
func (s *Claims) SawHolderAt(ctx context.Context, rp, consumer string, _ time.Time) error {
	return s.SawHolder(ctx, rp, consumer)
}

// SawHolder remembers the consumer last seen holding the device.
func (s *Claims) SawHolder(ctx context.Context, rp, consumer string) error {
	if err := s.fail("SawHolder"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders == nil {
		s.holders = map[string]holder{}
	}
	if s.holders[rp].consumer != consumer {
		s.seq++
		s.holders[rp] = holder{consumer: consumer, seq: s.seq}
	}
	return nil
}

// PreviousTenant is the newer of the last holder seen and the newest claim
// on the device, as claims.Store decides it: the device is every provider
// seen at rp's address (a re-created provider), its last clean the newest
// of theirs.
func (s *Claims) PreviousTenant(ctx context.Context, rp string) (handlers.Tenant, bool, error) {
	if err := s.fail("PreviousTenant"); err != nil {
		return handlers.Tenant{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rps := s.aliasesLocked(rp)
	cleaned, wasCleaned := 0, false
	used, usedRP := 0, ""
	for _, a := range rps {
		if cs := s.cleans[a]; len(cs) > 0 && cs[len(cs)-1] >= cleaned {
			cleaned, wasCleaned = cs[len(cs)-1], true
		}
		if u, ok := s.used[a]; ok && u > used {
			used, usedRP = u, a
		}
	}
	var last handlers.Tenant
	lastOrder, found := 0, false
	for _, a := range rps {
		t, order, ok := s.previousTenantLocked(a, cleaned, wasCleaned)
		if ok && (!found || order > lastOrder) {
			last, lastOrder, found = t, order, true
			last.DeviceRP = a
		}
	}
	if !found && used > cleaned {
		// A clean closed as possibly used after it, no tenant known
		// before it: an unknown one is held (claims.Store does the same).
		return handlers.Tenant{Instance: "unknown", DeviceRP: usedRP}, true, nil
	}
	return last, found, nil
}

// previousTenantLocked is rp's own last tenant since the clean numbered
// cleaned (when wasCleaned), with the order it was known at.
func (s *Claims) previousTenantLocked(rp string, cleaned int, wasCleaned bool) (handlers.Tenant, int, bool) {
	h, seen := s.holders[rp]
	for i := len(s.claims) - 1; i >= 0; i-- {
		e := s.claims[i]
		if !e.HasDevice(rp) {
			continue
		}
		if seen && h.consumer != e.InstanceUUID && h.seq > e.order {
			break
		}
		if wasCleaned && max(e.order, h.seq) <= cleaned {
			return handlers.Tenant{}, 0, false // held only before its last clean
		}
		return handlers.Tenant{Instance: e.InstanceUUID, Project: e.ProjectID}, max(e.order, h.seq), true
	}
	if seen && wasCleaned && h.seq <= cleaned {
		return handlers.Tenant{}, 0, false
	}
	if seen {
		return handlers.Tenant{Instance: h.consumer}, h.seq, true
	}
	return handlers.Tenant{}, 0, false
}

// aliasesLocked is rp and every other provider seen at its address.
func (s *Claims) aliasesLocked(rp string) []string {
	out := []string{rp}
	addr, ok := s.addresses[rp]
	if !ok {
		return out
	}
	for _, a := range slices.Sorted(maps.Keys(s.addresses)) {
		if a != rp && s.addresses[a] == addr {
			out = append(out, a)
		}
	}
	return out
}

// SawAddress remembers the address the tree shows rp at.
func (s *Claims) SawAddress(ctx context.Context, rp string, addr hardware.Address) error {
	if err := s.fail("SawAddress"); err != nil {
		return err
	}
	if addr == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addresses == nil {
		s.addresses = map[string]hardwareAddress{}
	}
	s.addresses[rp] = addr
	return nil
}

// Cleaned records a clean verdict for rp, as a cleaned run in
// claims.Store does: a tenant known only before it is no previous tenant.
func (s *Claims) Cleaned(rp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if s.cleans == nil {
		s.cleans = map[string][]int{}
	}
	s.cleans[rp] = append(s.cleans[rp], s.seq)
}

// UsedAfterClean marks rp's newest clean as closed because the device may
// have served a tenant after it that nobody recorded, as
// claims.Store.CloseCleanedUsed does: that clean no longer counts, the
// tenant before it is the previous tenant again (or an unknown one).
func (s *Claims) UsedAfterClean(rp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.cleans[rp]
	if len(cs) == 0 {
		return
	}
	if s.used == nil {
		s.used = map[string]int{}
	}
	s.used[rp] = max(s.used[rp], cs[len(cs)-1])
	s.cleans[rp] = cs[:len(cs)-1]
}

// Retire opens an operator's retirement of rp, as claims.Store.Retire
// does (the first open quarantine stands).
func (s *Claims) Retire(rp, reason string) {
	s.open(rp, handlers.OpenQuarantine{Reason: reason, Retired: true})
}

// NotePut refuses an un-reserve PUT of rp's run while rp has an open
// quarantine, as claims.PutJournal.NotePut does (Placement.Journal).
func (s *Claims) NotePut(rp, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.quarantines[rp]; ok {
		return &claims.QuarantineOpenError{Quarantine: claims.Quarantine{DeviceRP: rp, Reason: q.Reason, QuarantinedAt: s.now()}}
	}
	return nil
}

// RetireToWipe opens an operator's retirement of rp that waits for its
// retirement run (claims.WipePending or WipeDeclined).
func (s *Claims) RetireToWipe(rp, reason string) {
	s.open(rp, handlers.OpenQuarantine{Reason: reason, Retired: true, Wipe: true})
}

// WipeDone records that rp's retirement run ended, as the store does when
// that run's verdict is stored.
func (s *Claims) WipeDone(rp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.quarantines[rp]; ok {
		q.Wipe = false
		s.quarantines[rp] = q
		s.seq++
		s.retired[rp] = s.seq
	}
}

// WipeRetirementIfUsed implements handlers.RetirementWiper as
// claims.Store does: rp's retirement waiting for no wipe waits for its
// wipe once a tenant is known to have held rp since the retirement (or its
// last retirement run) and its last clean.
func (s *Claims) WipeRetirementIfUsed(ctx context.Context, rp string) (handlers.Tenant, bool, error) {
	if err := s.fail("WipeRetirementIfUsed"); err != nil {
		return handlers.Tenant{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.quarantines[rp]
	if !ok || !q.Retired || q.Wipe {
		return handlers.Tenant{}, false, nil
	}
	after := s.retired[rp]
	if cs := s.cleans[rp]; len(cs) > 0 {
		after = max(after, cs[len(cs)-1])
	}
	t, _, held := s.previousTenantLocked(rp, after, true)
	if !held {
		return handlers.Tenant{}, false, nil
	}
	q.Wipe = true
	q.Reason += "; consumer " + t.Instance + " held the device after this retirement's wipe was decided: retirement wipe pending"
	s.quarantines[rp] = q
	return t, true, nil
}

// Quarantine opens a cleaning verdict's quarantine of rp, as the store
// does when a run ends quarantined (the first open quarantine stands).
func (s *Claims) Quarantine(rp, reason string) {
	s.open(rp, handlers.OpenQuarantine{Reason: reason})
}

func (s *Claims) open(rp string, q handlers.OpenQuarantine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quarantines == nil {
		s.quarantines = map[string]handlers.OpenQuarantine{}
	}
	if _, ok := s.quarantines[rp]; !ok {
		s.quarantines[rp] = q
		s.seq++
		if s.retired == nil {
			s.retired = map[string]int{}
		}
		s.retired[rp] = s.seq
	}
}

// Release ends rp's quarantine, as claims.Store.ReleaseQuarantine does.
func (s *Claims) Release(rp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.quarantines, rp)
}

// OpenQuarantines implements handlers.QuarantineLister.
func (s *Claims) OpenQuarantines(ctx context.Context) (map[string]handlers.OpenQuarantine, error) {
	if err := s.fail("OpenQuarantines"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := maps.Clone(s.quarantines)
	for rp, q := range out {
		if q.Address == "" {
			q.Address = s.addresses[rp]
			out[rp] = q
		}
	}
	return out, nil
}

// ReattachQuarantine implements handlers.QuarantineLister as
// claims.Store does: from's quarantine moves to to when it is at addr,
// and closes when to has its own.
func (s *Claims) ReattachQuarantine(ctx context.Context, from, to string, addr hardware.Address) (bool, error) {
	if err := s.fail("ReattachQuarantine"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.quarantines[from]
	if !ok || cmp.Or(q.Address, s.addresses[from]) != addr {
		return false, nil
	}
	delete(s.quarantines, from)
	if _, own := s.quarantines[to]; !own {
		q.Address = addr
		q.Reason += "; provider re-created: was " + from + ", now " + to
		s.quarantines[to] = q
	}
	return true, nil
}

func (s *Claims) NoteDeleted(ctx context.Context, instance, messageID string) error {
	if err := s.fail("NoteDeleted"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted == nil {
		s.deleted = map[string]string{}
	}
	if _, ok := s.deleted[instance]; !ok {
		s.deleted[instance] = messageID
	}
	return nil
}

func (s *Claims) Deleted(ctx context.Context, instance string) (bool, error) {
	if err := s.fail("Deleted"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.deleted[instance]
	return ok, nil
}
