package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPurgeOnlyOwnHost: hosts sharing one database each purge their own
// records; a host with a retention must not delete the records (the audit
// proof) or claims of a host that keeps them forever.
func TestPurgeOnlyOwnHost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		keeper := mustOpen(t, cfg, WithClock(clock.Now)) // compute-2: retention 0
		cfg.RecordRetention, cfg.PurgeUnexported = time.Hour, true
		purger := mustOpen(t, cfg, WithClock(clock.Now)) // compute-1: retention 1h
		var runs []string
		for _, host := range []string{"compute-1", "compute-2"} {
			rs := nvmeRun()
			rs.Host = host
			run, _, err := keeper.OpenRun(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			if err := keeper.FinishRun(ctx, run.ID, RunQuarantined, "bad"); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run.ID)
			cl := gpuClaim("inst-"+host, "rp-x")
			cl.Host = host
			if _, err := keeper.RecordClaim(ctx, cl); err != nil {
				t.Fatal(err)
			}
			if _, err := keeper.ReleaseInstance(ctx, host, cl.InstanceUUID, "delete", "m"); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(48 * time.Hour)
		if n, c, err := purger.Purge(ctx, "compute-1"); err != nil || n != 1 || c != 1 {
			t.Fatalf("compute-1's Purge = %d runs, %d claims, %v; want its own 1, 1", n, c, err)
		}
		if _, err := keeper.GetRun(ctx, runs[0]); !errors.Is(err, ErrNoRun) {
			t.Fatalf("compute-1's own old run not purged: %v", err)
		}
		if _, err := keeper.GetRun(ctx, runs[1]); err != nil {
			t.Fatalf("compute-2's record deleted by compute-1's retention: %v", err)
		}
		if cs, err := keeper.ClaimsForInstance(ctx, "compute-2", "inst-compute-2"); err != nil || len(cs) != 1 {
			t.Fatalf("compute-2's claims after compute-1's purge = %+v, %v", cs, err)
		}
		if last, ok, err := keeper.LastClaimForDevice(ctx, "compute-2", "rp-x"); err != nil || !ok || last.InstanceUUID != "inst-compute-2" {
			t.Fatalf("compute-2's device index after compute-1's purge = %+v, %v, %v", last, ok, err)
		}
	})
}

// TestPurgeKeepsSignedChainUnbroken: retention removes only an unbroken
// prefix of a host's signed chain. An export of one device's records
// (here rp-a's: records 1 and 3) must not let retention cut record 3 out
// from between 2 and 4, which verify would report as a deleted record;
// and the newest record stays, so the next one never reuses its number.
func TestPurgeKeepsSignedChainUnbroken(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention = time.Hour
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		if err := s.RegisterKey(ctx, "compute-1"); err != nil {
			t.Fatal(err)
		}
		record := func(rp string) string {
			rs := nvmeRun()
			rs.DeviceRP = rp
			run, _, err := s.OpenRun(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			runStep(t, s, run.ID, "sanitize", false, StepOK, "done")
			if err := finish(ctx, s, run.ID, RunReturned, "ok"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Minute)
			return run.ID
		}
		var ids []string // ids[i] is record i+1
		for _, rp := range []string{"rp-a", "rp-b", "rp-a", "rp-b"} {
			ids = append(ids, record(rp))
		}
		present := func() (seqs []int) {
			for _, id := range ids {
				if seal, err := s.seal(ctx, s.r, id); err == nil {
					seqs = append(seqs, seal.Seq)
				} else if !errors.Is(err, ErrNoRun) {
					t.Fatal(err)
				}
			}
			return seqs
		}
		purge := func(want []int) {
			t.Helper()
			if _, _, err := s.Purge(ctx, "compute-1"); err != nil {
				t.Fatal(err)
			}
			if got := present(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("records left after purge = %v, want %v", got, want)
			}
			rep, err := s.VerifyHost(ctx, "compute-1", nil)
			if err != nil || rep.FirstSeq["compute-1"] != want[0] {
				t.Fatalf("verify after purge = %+v, %v; want OK from record %d", rep, err, want[0])
			}
		}
		// scourctl records export --device rp-a
		if err := s.MarkExported(ctx, ids[0], ids[2]); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Hour)
		purge([]int{2, 3, 4}) // 2 not exported: 3 waits for it
		if err := s.MarkExported(ctx, ids[1], ids[3]); err != nil {
			t.Fatal(err)
		}
		purge([]int{4}) // every record due: the newest stays
		ids = append(ids, record("rp-a"))
		purge([]int{5}) // 4, no longer the newest, goes; 5 is young
		if seal, _ := s.seal(ctx, s.r, ids[4]); seal.Seq != 5 {
			t.Fatalf("record after a purge numbered %d, want 5", seal.Seq)
		}
	})
}

// TestExportOfOpenRunIsNotFinal: a record exported while its run is open
// (running, or cleaned and waiting for its un-reserve) is not the final
// record; MarkExported skips such a run, so retention keeps the sealed
// record it closes with, which never left the store.
func TestExportOfOpenRunIsNotFinal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention = time.Hour
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		run := cleanedRun(t, s, "rp-nvme-0")
		doc, final, err := s.ExportRecord(ctx, run.ID)
		if err != nil || final || !strings.Contains(string(doc), `"cleaned"`) {
			t.Fatalf("ExportRecord of a cleaned run = final %v, %v; want a record that is not final", final, err)
		}
		if err := s.MarkExported(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReturned(ctx, run.ID, "clean"); err != nil {
			t.Fatal(err)
		}
		// A later record, so that the returned one is not the chain's newest.
		next, _, err := s.OpenRun(ctx, nvmeRun())
		if err == nil {
			err = s.FinishRun(ctx, next.ID, RunQuarantined, "bad")
		}
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(48 * time.Hour)
		if n, _, err := s.Purge(ctx, "compute-1"); err != nil || n != 0 {
			t.Fatalf("Purge = %d runs, %v; want the returned record kept: only its open state was exported", n, err)
		}
		doc, final, err = s.ExportRecord(ctx, run.ID)
		if err != nil || !final {
			t.Fatalf("ExportRecord of the returned run = final %v, %v; want final", final, err)
		}
		if rec, err := ParseRecord(doc); err != nil || rec.Signature == nil || rec.Result.State != "returned" {
			t.Fatalf("final export = %+v, %v; want the signed returned record", rec, err)
		}
		if err := s.MarkExported(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
		if n, _, err := s.Purge(ctx, "compute-1"); err != nil || n != 1 {
			t.Fatalf("Purge after the final export = %d runs, %v; want 1", n, err)
		}
	})
}
