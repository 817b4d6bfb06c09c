package placement

import (
	"context"
	"slices"
	"sync"
)

// eligible says which devices of this host carried the one-time-use
// trait and not the quarantine trait, each at the generation it was
// listed at (RP UUID -> generation).
type eligible map[string]int

// listEligible lists, in one call, the devices of this host's tree that
// carry the one-time-use trait and not the quarantine trait, each with its
// generation: GET /resource_providers?in_tree=<node>&required=<OTU>,!<Q>
// (forbidden traits need microversion 1.22; scour negotiates >= 1.26).
func (c *Client) listEligible(ctx context.Context) (eligible, error) {
	node, err := c.nodeRP(ctx)
	if err != nil {
		return nil, err
	}
	devs, err := c.listTree(ctx, node, c.cfg.OneTimeUseTrait+",!"+c.cfg.QuarantineTrait)
	if err != nil {
		return nil, err
	}
	out := make(eligible, len(devs))
	for _, p := range devs {
		out[p.UUID] = p.Generation
	}
	return out, nil
}

// ConfirmShared is Confirm for many devices at once: every device whose
// check is asked for while a listing is under way waits for the next
// listing, which begins after all of them asked and so after each one's
// read; that one call confirms them all. A device listed at the
// generation seen was read at is confirmed as Confirm confirms it: the
// generation did not move from the read to the listing, so its
// allocations and inventory are those read, and the listing's trait
// filter, evaluated between the two, saw its traits at that generation
// (one-time-use, not quarantined). Any other device (not listed: the
// generation moved, a trait is missing or the quarantine trait is set),
// and every device when the listing fails, is Confirm'ed on its own.
//
// Why the listing must begin after the read: Placement evaluates a
// listing's trait filters and reads the providers' generations in
// separate statements, traits first; on a database that does not give
// one snapshot to a transaction's statements, a trait written between
// them shows with its new generation but filtered as before. A read whose
// generation was seen before the listing began pins the generation over
// the filter's moment, so equal generations mean the filter saw that
// generation's traits.
func (c *Client) ConfirmShared(ctx context.Context, seen Device) (Device, error) {
	d, _, err := c.confirmShared(ctx, seen)
	return d, err
}

// confirmShared is ConfirmShared, also saying how the device was
// confirmed: "listing" (the shared listing) or "read" (read on its own).
func (c *Client) confirmShared(ctx context.Context, seen Device) (Device, string, error) {
	if err := checkRef(seen.Ref); err != nil {
		return seen, "read", devErr("read", seen.Ref, err)
	}
	if seen.raw == nil {
		d, err := c.Device(ctx, seen.Ref)
		return d, "read", err
	}
	if e, err := c.shared.next(ctx, c.listEligible); err == nil {
		if d, ok := c.withEligible(seen, e); ok {
			return d, "listing", nil
		}
	}
	d, err := c.Confirm(ctx, seen)
	return d, "read", err
}

// withEligible returns seen with its trait facts known when e listed it
// at the generation seen was read at (see ConfirmShared).
func (c *Client) withEligible(seen Device, e eligible) (Device, bool) {
	gen, ok := e[seen.UUID]
	if !ok || gen != seen.Generation || seen.raw.Generation != seen.Generation {
		return seen, false
	}
	d := seen
	d.Consumers = slices.Clone(seen.Consumers)
	d.traits, d.traitsRead = []string{c.cfg.OneTimeUseTrait}, true
	d.Quarantined = false
	d.Why = ""
	c.derive(&d, seen.raw.Count)
	return d, true
}

// sharedListing runs listings one at a time and hands each to every
// caller that asked before it began (a group commit): callers arriving
// while one runs share the next.
type sharedListing struct {
	mu      sync.Mutex
	pending *listing      // not begun yet: its callers all asked before it begins
	turn    chan struct{} // capacity 1: the listing under way
}

type listing struct {
	done    chan struct{}
	callers int // that share it
	e       eligible
	err     error
}

func (s *sharedListing) next(ctx context.Context, list func(context.Context) (eligible, error)) (eligible, error) {
	s.mu.Lock()
	if s.turn == nil {
		s.turn = make(chan struct{}, 1)
	}
	l, lead := s.pending, false
	if l == nil {
		l, lead = &listing{done: make(chan struct{})}, true
		s.pending = l
	}
	l.callers++
	s.mu.Unlock()
	if lead {
		s.run(ctx, l, list)
	}
	select {
	case <-l.done:
		return l.e, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run waits for the listing under way to end, begins l (later callers
// then wait for the one after), and hands its result to l's callers.
func (s *sharedListing) run(ctx context.Context, l *listing, list func(context.Context) (eligible, error)) {
	defer close(l.done)
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		s.mu.Lock()
		s.pending = nil
		s.mu.Unlock()
		l.err = ctx.Err() // its callers confirm one by one
		return
	}
	defer func() { <-s.turn }()
	s.mu.Lock()
	s.pending = nil
	s.mu.Unlock()
	l.e, l.err = list(ctx)
}
