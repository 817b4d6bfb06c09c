package claims

import (
	"context"
	"errors"
	"testing"
)

// The un-reserve PUT journal of a cleaned run: empty until a PUT is
// noted, cleared on demand, and refused for a run that is not waiting for
// its return (the PUT must then not be sent).
func TestPutJournal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run := cleanedRun(t, s, "rp-nvme-0")
		j := s.PutJournal(run.ID)
		want := func(gen int, pending bool) {
			t.Helper()
			if g, p, err := j.LastPut(ctx); err != nil || p != pending || (pending && g != gen) {
				t.Fatalf("LastPut = %d, %t, %v; want %d, %t", g, p, err, gen, pending)
			}
		}
		want(0, false)
		if err := j.NotePut(ctx, 12); err != nil {
			t.Fatal(err)
		}
		want(12, true)
		// A resumed run finds it in a new store handle (a restarted scourd).
		if g, p, err := mustOpen(t, cfg).PutJournal(run.ID).LastPut(ctx); err != nil || !p || g != 12 {
			t.Fatalf("LastPut after reopening = %d, %t, %v; want 12, true", g, p, err)
		}
		if err := j.ClearPut(ctx); err != nil {
			t.Fatal(err)
		}
		want(0, false)
		if err := s.MarkReturned(ctx, run.ID, "un-reserved"); err != nil {
			t.Fatal(err)
		}
		if err := j.NotePut(ctx, 13); !errors.Is(err, ErrNotCleaned) {
			t.Fatalf("NotePut on a returned run: %v, want ErrNotCleaned", err)
		}
		if _, _, err := s.PutJournal("no-such-run").LastPut(ctx); !errors.Is(err, ErrNoRun) {
			t.Fatalf("LastPut of an unknown run: %v, want ErrNoRun", err)
		}
	})
}

// A cleaned run still waiting for its return when schema v6 came may
// have sent a PUT nobody journaled: the upgrade journals it at an unknown
// generation, so a resumed un-reserve cannot take a device that served a
// tenant since for one never returned. Other runs journal nothing.
func TestUpgradeJournalsWaitingRunsAsUnknown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		waiting := cleanedRun(t, s, "rp-nvme-0")
		returned := cleanedRun(t, s, "rp-nvme-1")
		if err := s.MarkReturned(ctx, returned.ID, "un-reserved"); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// Back to v5: the column goes, and so does its version.
		db := mustOpenRaw(t, cfg)
		for _, q := range []string{
			`ALTER TABLE cleaning_runs DROP COLUMN unreserve_put_gen`,
			`UPDATE scour_schema SET version = 5 WHERE table_name = 'cleaning_runs'`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = mustOpen(t, cfg)
		if g, p, err := s.PutJournal(waiting.ID).LastPut(ctx); err != nil || !p || g != UnknownPutGeneration {
			t.Errorf("waiting run after the upgrade: LastPut = %d, %t, %v; want %d, true", g, p, err, UnknownPutGeneration)
		}
		if _, p, err := s.PutJournal(returned.ID).LastPut(ctx); err != nil || p {
			t.Errorf("returned run after the upgrade: pending = %t, %v; want none", p, err)
		}
	})
}
