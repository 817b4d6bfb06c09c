package claims

import (
	"context"
	"errors"
	"testing"
)

// The generation of a run's first destructive all-clear is kept once: a
// later one does not replace it, the run's PUT journal gives it, a
// finished run takes none, and a run stored before schema v7 reads as
// having none (its resume starts over).
func TestClearGeneration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run := openCategoryRun(t, s, "")
		if _, ok, err := s.ClearGeneration(ctx, run.ID); err != nil || ok {
			t.Fatalf("ClearGeneration of a new run = %v, %v; want none", ok, err)
		}
		for _, gen := range []int{7, 9} {
			if err := s.NoteClearGeneration(ctx, run.ID, gen); err != nil {
				t.Fatal(err)
			}
		}
		if gen, ok, err := s.ClearGeneration(ctx, run.ID); err != nil || !ok || gen != 7 {
			t.Fatalf("ClearGeneration = %d, %v, %v; want 7, the first one", gen, ok, err)
		}
		// The run's PUT journal gives it to the placement client: its
		// un-reserve PUT is sent only at that generation (rev3 H1).
		if gen, ok, err := s.PutJournal(run.ID).ClearGeneration(ctx); err != nil || !ok || gen != 7 {
			t.Fatalf("PutJournal.ClearGeneration = %d, %v, %v; want 7", gen, ok, err)
		}
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunFailed, "failed"); err != nil {
			t.Fatal(err)
		}
		if err := s.NoteClearGeneration(ctx, run.ID, 3); !errors.Is(err, ErrRunFinished) {
			t.Fatalf("NoteClearGeneration on a finished run: %v; want ErrRunFinished", err)
		}
		old := openCategoryRun(t, s, "")
		s.Close()
		// Back to v6: the column goes (v8's too), and so does its version.
		db := mustOpenRaw(t, cfg)
		for _, q := range []string{
			`ALTER TABLE cleaning_runs DROP COLUMN used_after_clean`,
			`ALTER TABLE cleaning_runs DROP COLUMN clear_gen`,
			`UPDATE scour_schema SET version = 6 WHERE table_name = 'cleaning_runs'`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = mustOpen(t, cfg)
		if _, ok, err := s.ClearGeneration(ctx, old.ID); err != nil || ok {
			t.Fatalf("ClearGeneration of a run stored before v7 = %v, %v; want none", ok, err)
		}
	})
}
