package claims

import (
	"context"
	"errors"
	"strings"
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

// A cleaned run stored by a scour without the journal (before schema
// v6, or an older scourd still running on a shared PostgreSQL during a
// rolling upgrade) may have sent a PUT nobody wrote down: its journal
// reads a PUT at an unknown generation, so a resumed un-reserve cannot
// take a device that served a tenant since for one never returned.
func TestRunsCleanedWithoutTheJournalReadUnknown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		before := cleanedRun(t, s, "rp-nvme-0")
		s.Close()
		// Back to v5: the columns go (v7's and v8's too), and so does its
		// version.
		db := mustOpenRaw(t, cfg)
		for _, q := range []string{
			`ALTER TABLE cleaning_runs DROP COLUMN used_after_clean`,
			`ALTER TABLE cleaning_runs DROP COLUMN clear_gen`,
			`ALTER TABLE cleaning_runs DROP COLUMN unreserve_journaled`,
			`ALTER TABLE cleaning_runs DROP COLUMN unreserve_put_gen`,
			`UPDATE scour_schema SET version = 5 WHERE table_name = 'cleaning_runs'`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = mustOpen(t, cfg)
		if g, p, err := s.PutJournal(before.ID).LastPut(ctx); err != nil || !p || g != UnknownPutGeneration {
			t.Errorf("run cleaned before v6: LastPut = %d, %t, %v; want %d, true", g, p, err, UnknownPutGeneration)
		}
		// An older scourd's clean verdict after the upgrade: it writes the
		// state and cleaned_at, not the journal flag.
		during := cleanedRun(t, s, "rp-nvme-1")
		if _, err := db.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET unreserve_journaled = 0 WHERE id = ?`), during.ID); err != nil {
			t.Fatal(err)
		}
		if g, p, err := s.PutJournal(during.ID).LastPut(ctx); err != nil || !p || g != UnknownPutGeneration {
			t.Errorf("run cleaned by an older scourd after the upgrade: LastPut = %d, %t, %v; want %d, true", g, p, err, UnknownPutGeneration)
		}
	})
}

// While an un-reserve PUT of a run may have landed, a record closed as
// not returned must not say scour did not return the device: it says the
// return is unknown. With no PUT pending it says "not returned".
func TestClosedRecordHedgesAPendingPut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		pending := cleanedRun(t, s, "rp-nvme-0")
		if err := s.PutJournal(pending.ID).NotePut(ctx, 41); err != nil {
			t.Fatal(err)
		}
		none := cleanedRun(t, s, "rp-nvme-1")
		for _, id := range []string{pending.ID, none.ID} {
			if err := s.CloseCleaned(ctx, id, "Placement showed the device allocated"); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := s.GetRun(ctx, pending.ID); !strings.Contains(got.Summary, "not recorded as returned (scour's un-reserve, a PUT at generation 41, may have returned it") ||
			strings.Contains(got.Summary, "not returned to the pool by scour") {
			t.Errorf("summary with a PUT pending = %q", got.Summary)
		}
		if got, _ := s.GetRun(ctx, none.ID); !strings.HasPrefix(got.Summary, "cleaned; not returned to the pool by scour: ") {
			t.Errorf("summary with no PUT = %q", got.Summary)
		}
	})
}
