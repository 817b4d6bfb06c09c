package pipelinestore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
)

// genChecker answers all-clear at Placement generation gen and counts
// the resume's generation reads.
type genChecker struct {
	mu    sync.Mutex
	gen   int
	reads int
}

func (g *genChecker) HasAllocations(context.Context, string) (bool, error) { return false, nil }

func (g *genChecker) CheckedGeneration(string) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, true
}

func (g *genChecker) Generation(context.Context, string) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	return g.gen, nil
}

func (g *genChecker) Reads() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads
}

var _ pipeline.GenerationChecker = (*genChecker)(nil)

// resumeAt interrupts a run (sanitize done) at generation 7, then cleans
// the device again with Placement at generation now (the second
// scourd's checker, returned) and, when before, the first run kept no
// generation (a checker without them: as a run stored before schema v7).
func resumeAt(t *testing.T, now int, before bool) (*claims.Store, pipeline.Result, []string, *genChecker) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(step("sanitize", true), step("verify", true))
	var first pipeline.AllocationChecker
	if !before {
		g := &genChecker{gen: 7}
		first = g
		defer func() {
			if g.Reads() != 0 {
				t.Errorf("a run that was not resumed read the generation %d times; want 0 (no extra Placement request)", g.Reads())
			}
		}()
	}
	interruptAtVerify(t, cfg, openStore(t, dir), nvmeWithSerial(""), first)
	s := openStore(t, dir)
	g, pr := &genChecker{gen: now}, &fakePlugins{}
	res, err := engineWith(t, cfg, s, pr, nvmeWithSerial(""), g).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("Clean after the restart = %+v, %v", res, err)
	}
	return s, *res, pr.Calls(), g
}

// The variant of rev2 HIGH 2 the store cannot see: while scourd was down
// the fence was lifted, a tenant used the device and left, and no scan
// caught it. Placement's generation moved, and the run that erased before
// it is not resumed: a new run erases again, the old one is closed
// saying why. Resuming cost one generation read, the ordinary run none.
func TestResumeStartsOverWhenTheGenerationMoved(t *testing.T) {
	s, res, calls, g := resumeAt(t, 10, false)
	if !slices.Equal(calls, []string{"sanitize", "verify"}) {
		t.Fatalf("calls %v: want the erase again, then verify", calls)
	}
	if r := supersededBy(t, s, res.RunID); r.State != claims.RunFailed || !strings.Contains(r.Summary, "generation of the device moved from 7") || !strings.Contains(r.Summary, "to 10") {
		t.Fatalf("interrupted run = %+v; want failed, superseded, naming generations 7 and 10", r)
	}
	if g.Reads() != 1 {
		t.Fatalf("the resume read the generation %d times; want 1", g.Reads())
	}
	if gen, ok, _ := s.ClearGeneration(context.Background(), res.RunID); !ok || gen != 10 {
		t.Fatalf("new run's generation = %d, %v; want 10, its own all-clear's", gen, ok)
	}
}

// Placement's generation unmoved: the run is resumed, the erase kept, for
// one generation read.
func TestResumeKeepsTheEraseWhileTheGenerationHolds(t *testing.T) {
	s, _, calls, g := resumeAt(t, 7, false)
	if !slices.Equal(calls, []string{"verify"}) {
		t.Fatalf("calls %v: want verify alone (the erase was done in this run)", calls)
	}
	if runs, _ := s.ListRuns(context.Background(), claims.RunFilter{Device: target.RPUUID}); len(runs) != 1 {
		t.Fatalf("runs = %+v; want the one resumed", runs)
	}
	if g.Reads() != 1 {
		t.Fatalf("the resume read the generation %d times; want 1", g.Reads())
	}
}

// A run that kept no generation (stored before schema v7, or by an older
// scour) is treated the safe way: its erase does not count.
func TestResumeStartsOverWithoutAGeneration(t *testing.T) {
	s, res, calls, g := resumeAt(t, 7, true)
	if !slices.Equal(calls, []string{"sanitize", "verify"}) {
		t.Fatalf("calls %v: want the erase again, then verify", calls)
	}
	if r := supersededBy(t, s, res.RunID); r.State != claims.RunFailed || !strings.Contains(r.Summary, "no Placement generation") {
		t.Fatalf("interrupted run = %+v; want failed, superseded, saying it kept no generation", r)
	}
	if g.Reads() != 0 {
		t.Fatalf("read the generation %d times; want 0 (nothing to compare)", g.Reads())
	}
}

// A cleaned run waiting for its un-reserve, no PUT sent, is not resumed
// into an un-reserve once the generation moved (a later process would
// return the device on the old clean); with a PUT that may have landed,
// the PUT journal decides at the un-reserve instead (no read here).
func TestCleanedRunResumedOnlyWhileTheGenerationHolds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		put       bool
		now       int
		wantCalls []string
		wantReads int
	}{
		{"moved, no PUT", false, 10, []string{"sanitize"}, 1},
		{"held, no PUT", false, 7, nil, 1},
		{"moved, PUT may have landed", true, 10, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := config(step("sanitize", true))
			s := openStore(t, filepath.Join(t.TempDir(), "state"))
			first, err := engineWith(t, cfg, s, &fakePlugins{}, nvmeWithSerial(""), &genChecker{gen: 7}).Clean(ctx, target)
			if err != nil || first.Verdict != pipeline.VerdictClean {
				t.Fatalf("Clean = %+v, %v", first, err)
			}
			if tc.put {
				if err := s.PutJournal(first.RunID).NotePut(ctx, 7); err != nil {
					t.Fatal(err)
				}
			}
			g, pr := &genChecker{gen: tc.now}, &fakePlugins{}
			again, err := engineWith(t, cfg, s, pr, nvmeWithSerial(""), g).Clean(ctx, target)
			if err != nil || again.Verdict != pipeline.VerdictClean || !slices.Equal(pr.Calls(), tc.wantCalls) || g.Reads() != tc.wantReads {
				t.Fatalf("Clean after the restart = %+v, %v, calls %v, generation reads %d; want clean, calls %v, %d reads",
					again, err, pr.Calls(), g.Reads(), tc.wantCalls, tc.wantReads)
			}
			if resumed := again.RunID == first.RunID; resumed != (tc.wantCalls == nil) {
				t.Fatalf("run %s after run %s: resumed %v; want %v", again.RunID, first.RunID, resumed, tc.wantCalls == nil)
			}
			if old, _ := s.GetRun(ctx, first.RunID); tc.wantCalls != nil && (old.State != claims.RunCleaned || !old.Closed() || !strings.Contains(old.Summary, "generation")) {
				t.Fatalf("old run = %+v; want closed as cleaned, not returned, naming the generation", old)
			}
		})
	}
}
