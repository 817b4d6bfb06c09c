package placement

import (
	"context"
	"errors"
	"fmt"
)

// A PutJournal keeps, durably, what the un-reserve PUTs of one cleaning
// run may have done: the provider generation of the last PUT that may
// have landed, written before the PUT is sent.
//
// Why: a scourd that crashes after its PUT landed and before the record
// says "returned" finds the device again after its restart. Placement
// may show it reserved and free then because another tenant got it,
// used it and left it burned while scourd was down (a lost notification
// leaves no claim behind). Un-reserving it then would hand that tenant's
// data to the next. A PUT at generation G that landed moved the provider
// to G+1 with reserved 0, so a device found reserved at G or G+1 was
// never schedulable since (capacity 0 refuses any allocation), while one
// found reserved beyond G+1 may have served a tenant: ErrStaleReturn,
// and the device is cleaned again.
type PutJournal interface {
	// LastPut returns the generation of the run's last PUT that may have
	// landed (pending false: none). -1 means a PUT at an unknown
	// generation (a run older than the journal): any generation is then
	// too far.
	LastPut(ctx context.Context) (gen int, pending bool, err error)
	// NotePut stores gen as the generation of a PUT about to be sent.
	NotePut(ctx context.Context, gen int) error
	// ClearPut records that no PUT of the run can land any more (the last
	// one was refused with a generation conflict).
	ClearPut(ctx context.Context) error
	// ClearGeneration returns the provider generation of the all-clear
	// the run's first destructive attempt started on (ok false: none
	// stored; no destructive step ran, or a run older than schema v7).
	// The run's PUTs are sent only at that generation (sinceClear).
	ClearGeneration(ctx context.Context) (gen int, ok bool, err error)
}

// UnknownPutGeneration is LastPut's generation for a PUT that may have
// landed at a generation nobody wrote down.
const UnknownPutGeneration = -1

// MemJournal is a PutJournal kept in memory: one un-reserve sequence in a
// process that does not outlive it (tests, tools). The zero value has no
// PUT.
type MemJournal struct {
	Gen     int
	Pending bool
	// Clear, when ClearKnown, is the run's all-clear generation.
	Clear      int
	ClearKnown bool
}

func (m *MemJournal) LastPut(context.Context) (int, bool, error) { return m.Gen, m.Pending, nil }
func (m *MemJournal) NotePut(_ context.Context, gen int) error {
	m.Gen, m.Pending = gen, true
	return nil
}
func (m *MemJournal) ClearPut(context.Context) error {
	m.Gen, m.Pending = 0, false
	return nil
}
func (m *MemJournal) ClearGeneration(context.Context) (int, bool, error) {
	return m.Clear, m.ClearKnown, nil
}

// putState is what the un-reserve PUTs of one run may have done, as the
// journal and this call's answers tell.
type putState struct {
	j PutJournal
	// pending: a PUT of the run at generation gen may have landed (no
	// definite answer, or sent by an earlier call whose answer was lost).
	// Every PUT is sent at the generation of the read before it, and a
	// read beyond gen+1 ends the sequence (ErrStaleReturn), so at most
	// one generation is ever pending.
	pending bool
	gen     int
	// clear, when clearKnown, is the generation of the all-clear the
	// run's destructive steps started on (PutJournal.ClearGeneration).
	clear      int
	clearKnown bool
}

func newPutState(ctx context.Context, j PutJournal) (*putState, error) {
	if j == nil {
		j = &MemJournal{}
	}
	gen, pending, err := j.LastPut(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the run's last un-reserve PUT from the claims store: %w", err)
	}
	clear, known, err := j.ClearGeneration(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the generation the run's destructive steps started on from the claims store: %w", err)
	}
	return &putState{j: j, pending: pending, gen: gen, clear: clear, clearKnown: known}, nil
}

// ours says whether a device found at reserved 0 may be scour's own write.
func (p *putState) ours() bool { return p.pending }

// reread takes a read of a reserved device at generation gen: it ends a
// pending PUT that can no longer land, or says the device may have been
// schedulable since (ErrStaleReturn): since a PUT of the run, or since
// the all-clear its destructive steps started on (sinceClear).
func (p *putState) reread(gen int) error {
	if err := p.sincePut(gen); err != nil {
		return err
	}
	return p.sinceClear(gen)
}

// at says whether a PUT at gen may be sent without a re-read: the run
// knows no all-clear, or gen is it.
func (p *putState) at(gen int) bool { return !p.clearKnown || gen == p.clear }

// sinceClear refuses a reserved device at another generation than the
// run's all-clear. Scour writes to a device while its run is open only
// to fence it again (refence, requarantine: itself evidence that someone
// else lifted the fence) and with the run's own un-reserve PUT, which
// leaves reserved 0 (ours, before any re-read). So the move is someone
// else's write: the fence lifted, a tenant's allocation and Nova's burn
// (the erase before it does not cover that tenant's data), or an
// innocent inventory or trait rewrite (one extra clean). Without a known
// all-clear (no destructive step ran, a run older than schema v7) only
// the PUT journal applies.
func (p *putState) sinceClear(gen int) error {
	if p.at(gen) {
		return nil
	}
	return fmt.Errorf("%w: this run's destructive steps started on the device's all-clear at Placement generation %d, and Placement now shows it reserved at generation %d: something else wrote to its provider while it was being cleaned (its fence lifted and a tenant may have used it, then Nova's burn; or an agent rewrote its inventory or traits), so this clean no longer counts",
		ErrStaleReturn, p.clear, gen)
}

// sincePut is reread for the run's PUT journal.
func (p *putState) sincePut(gen int) error {
	switch {
	case !p.pending || gen == p.gen:
		return nil
	case p.gen != UnknownPutGeneration && gen == p.gen+1:
		// Reserved at G+1: our PUT at G did not land (it would have left
		// reserved 0 at G+1), and cannot any more.
		p.pending = false
		return nil
	case p.gen == UnknownPutGeneration:
		return fmt.Errorf("%w: an un-reserve PUT of this run may have been sent at an unrecorded generation (the run was cleaned by a scour without the PUT journal), and Placement now shows the device reserved at generation %d",
			ErrStaleReturn, gen)
	}
	return fmt.Errorf("%w: an un-reserve PUT of this run at generation %d may have landed, and Placement now shows the device reserved at generation %d",
		ErrStaleReturn, p.gen, gen)
}

// send journals a PUT at gen before it is sent, and says whether an
// earlier PUT at gen may still land. A journal that cannot be written
// stops the PUT: an unrecorded PUT could not be told apart later.
func (p *putState) send(ctx context.Context, gen int) (earlier bool, err error) {
	earlier = p.pending && p.gen == gen
	if !earlier {
		if err := p.j.NotePut(ctx, gen); err != nil {
			return false, fmt.Errorf("recording the un-reserve PUT in the claims store before sending it (nothing sent): %w", err)
		}
	}
	p.pending, p.gen = true, gen
	return earlier, nil
}

// answered takes the answer to a PUT sent after send said earlier. A
// conflict proves that PUT did not and will not land; an earlier
// unanswered PUT at the same generation still may (it may be what moved
// the generation). The error is the journal's: failing to clear it only
// costs a needless clean later.
func (p *putState) answered(ctx context.Context, err error, earlier bool) error {
	if !errors.Is(err, errConflict) || earlier {
		return nil
	}
	p.pending = false
	return p.j.ClearPut(ctx)
}
