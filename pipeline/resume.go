package pipeline

import (
	"context"
	"fmt"
)

// GenerationChecker is an optional AllocationChecker capability
// (placement.Gate): the Placement resource-provider generation behind its
// answers, for the resume of an interrupted run (rule 5). A run keeps the
// generation of the all-clear its first destructive attempt started on
// (GenerationRecorder); resumed with a destructive step's outcome kept, it
// reads the generation again, and any move starts it over: while its run
// is open scour writes to a device only with the un-reserve PUT, which
// its own journal covers (Run.PutMayHaveLanded), and to fence it again
// after someone else lifted the fence (refence, requarantine). Placement
// moves the generation on every inventory, trait or allocation write, not
// when allocations are DELETEd: a tenant served while scourd was down
// (the fence lifted, an allocation, Nova's burn) always moves it.
type GenerationChecker interface {
	// CheckedGeneration is the generation of the read behind the last
	// answer about rp (no request).
	CheckedGeneration(rp string) (gen int, ok bool)
	// Generation reads rp's generation now (one request).
	Generation(ctx context.Context, rp string) (int, error)
}

// GenerationRecorder is a Checkpoints that keeps a run's generation: the
// first one noted stays, and OpenRun returns it with a resumed run
// (Run.ClearGen).
type GenerationRecorder interface {
	NoteClearGeneration(ctx context.Context, runID string, gen int) error
}

// keepClearGeneration stores, once per run and before its first
// destructive attempt starts, the generation of the all-clear that
// attempt starts on. A run without it would, at its un-reserve, fall
// back to asking whether anybody holds the device now, which a tenant
// that came and went during the run passes: when the store refuses the
// write, the attempt (s, after done) does not start and the run ends
// retry-later, the device reserved.
func (r *run) keepClearGeneration(ctx context.Context, s *Step, done string) error {
	gc, ok := r.e.alloc.(GenerationChecker)
	rec, records := r.e.cp.(GenerationRecorder)
	if !ok || !records || r.run.HasClearGen || r.retiring != retireNone {
		return nil
	}
	gen, ok := gc.CheckedGeneration(r.t.RPUUID)
	if !ok {
		return nil
	}
	if err := rec.NoteClearGeneration(ctx, r.run.ID, gen); err != nil {
		untouched := ", without touching the device"
		if done != "" {
			untouched = fmt.Sprintf(", after %s: the device may be partly erased", done)
		}
		return errStop{VerdictRetryLater, fmt.Sprintf("device %s (rp %s): could not store Placement's generation %d in run %s before destructive step %s: %v; without it the un-reserve could not tell whether a tenant used the device during the run, so the step does not start%s; it stays reserved and is retried (check the claims store)",
			r.t.Address, r.t.RPUUID, gen, r.run.ID, s.Name, err, untouched)}
	}
	r.run.ClearGen, r.run.HasClearGen = gen, true
	return nil
}

// movedSince says why the open run must not be resumed although its
// store would resume it ("": it may): it keeps a destructive step's
// outcome, and Placement's generation of the device moved since that
// step's all-clear, or the run recorded none (stored by an older scour).
// It costs one Placement request, only on such a resume; a run with an
// un-reserve PUT that may have landed is left to the PUT journal, which
// the un-reserve reads anyway.
func (r *run) movedSince(ctx context.Context, run Run, recs []StepRecord) (string, error) {
	gc, ok := r.e.alloc.(GenerationChecker)
	_, records := r.e.cp.(GenerationRecorder)
	if !ok || !records || r.retiring != retireNone || run.PutMayHaveLanded || !r.keepsDestructive(run.ID, recs) {
		return "", nil
	}
	if !run.HasClearGen {
		return "the run recorded no Placement generation for its destructive steps (stored by a scour that kept none): whoever used the device since cannot be ruled out", nil
	}
	gen, err := gc.Generation(ctx, r.t.RPUUID)
	if err != nil {
		return "", fmt.Errorf("device %s: reading Placement's generation of rp %s to resume run %s: %w (the run stays open and is retried)", r.t.Address, r.t.RPUUID, run.ID, err)
	}
	if gen != run.ClearGen {
		return fmt.Sprintf("Placement's generation of the device moved from %d, at the all-clear of the run's first destructive step, to %d while the run was interrupted, and scour wrote nothing to it since: someone changed its inventory, traits or allocations (the fence lifted, another tenant allocated and burned it?)",
			run.ClearGen, gen), nil
	}
	return "", nil
}

// keepsDestructive reports whether a resume would keep a destructive
// step's outcome (done in run runID).
func (r *run) keepsDestructive(runID string, recs []StepRecord) bool {
	steps := r.prof.Pipeline.Steps
	for _, rec := range recs {
		if rec.RunID == runID && rec.done() && rec.Index >= 0 && rec.Index < len(steps) &&
			steps[rec.Index].Name == rec.Name && (steps[rec.Index].Destructive == nil || *steps[rec.Index].Destructive) {
			return true
		}
	}
	return false
}
