package claims

import (
	"context"
	"errors"
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
