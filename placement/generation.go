package placement

import "context"

// The generations a cleaning run's resume compares (pipeline's
// GenerationChecker; docs/lifecycle.md, rule 5). A run remembers the
// provider generation of the all-clear its first destructive attempt
// started on; resumed after a restart, it reads the generation again,
// and a generation that moved for a reason scour cannot account for (an
// inventory, trait or allocation write by someone else: the fence lifted,
// a tenant allocated, Nova's burn) starts the run over. Placement does
// not move it when a consumer's allocations are DELETEd, so what the
// comparison sees is the lift, the allocation and the burn around them.

// CheckedGeneration returns the provider generation of the read behind
// the gate's last answer for rp before a destructive step
// (HasAllocations, HasAllocationsAsOf, HasAllocationsRetired), fresh or
// reused; ok false before any. It asks Placement nothing. Only the run
// cleaning rp checks it, one check at a time, so the answer is the one
// that run just got.
func (g *Gate) CheckedGeneration(rp string) (gen int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gen, ok = g.checked[rp]
	return gen, ok
}

func (g *Gate) noteChecked(d Device) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checked[d.UUID] = d.Generation
}

// Generation reads rp's provider generation now: one request (its
// allocations, whose answer carries the generation), retried as every
// read is. The resume of an interrupted run compares it with the one its
// destructive work started at.
func (g *Gate) Generation(ctx context.Context, rp string) (int, error) {
	dev := Ref{UUID: rp, Name: rp}
	var gen int
	err := g.c.retry(ctx, func(ctx context.Context) error {
		a, err := g.c.allocationsOf(ctx, rp)
		gen = a.Generation
		return err
	}, dev.logAttrs()...)
	if err != nil {
		return 0, devErr("generation read", dev, err)
	}
	return gen, nil
}
