package handlerstore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/handlers/handlerstest"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
)

// BenchmarkRefenceScan measures one reconciler scan of a host with 64
// available devices, each with a history (a claim, a holder seen, a
// clean verdict since), against the real store on sqlite and on
// PostgreSQL: full is a periodic scan, which asks the store about every
// free, unfenced device (refence's PreviousTenant, as every scan did
// before the cache); cached is a triggered scan, which asks only about
// devices with a tenant write since they were found not held (none
// here). It prints both per scan and their ratio.
func BenchmarkRefenceScan(b *testing.B) {
	for _, driver := range []string{claims.DriverSQLite, claims.DriverPostgres} {
		b.Run(driver, func(b *testing.B) {
			cfg := claims.Config{Driver: driver, StatePath: filepath.Join(b.TempDir(), "state")}
			if driver == claims.DriverPostgres {
				cfg = claims.Config{Driver: driver, DSN: testkit.PostgresSchema(b)}
			}
			rec := hostWithHistory(b, cfg, 64)
			ctx := context.Background()
			var full, cached time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := rec.Scan(ctx, "interval"); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := rec.Scan(ctx, "instance.create.end"); err != nil {
					b.Fatal(err)
				}
				full += t1.Sub(t0)
				cached += time.Since(t1)
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
			b.ReportMetric(ms(full), "full-ms/scan")
			b.ReportMetric(ms(cached), "cached-ms/scan")
			b.ReportMetric(float64(full)/float64(cached), "full/cached")
		})
	}
}

// hostWithHistory is a reconciler over the real store and n available
// devices, each once held by an instance and cleaned since; its first
// scan is done.
func hostWithHistory(b *testing.B, cfg claims.Config, n int) *handlers.Reconciler {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st, err := claims.Open(ctx, cfg, claims.WithClock(clk.Now), claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	c := &Claims{Store: st, Host: "compute-1"}
	w := handlerstest.NewWorld()
	for i := 0; i < n; i++ {
		rp := fmt.Sprintf("rp-%d", i)
		addr := hardware.Address(fmt.Sprintf("0000:%02x:00.0", 0x10+i))
		w.AddDevice(rp, addr)
		inst := fmt.Sprintf("inst-%d", i)
		steps := []error{
			c.SawAddress(ctx, rp, addr),
			c.RecordClaim(ctx, handlers.Claim{Host: "compute-1", Node: "compute-1", InstanceUUID: inst, ProjectID: "p",
				Devices: []handlers.ClaimDevice{{RPUUID: rp, RPName: "compute-1_" + string(addr), Address: addr, ResourceClass: "CUSTOM_NVME"}}}),
			c.SawHolder(ctx, rp, inst),
			c.ReleaseClaim(ctx, inst, false, "deleted", "msg-"+inst),
		}
		clk.Add(time.Second)
		run, _, err := st.OpenRun(ctx, claims.RunStart{Host: "compute-1", DeviceRP: rp, Address: string(addr), PrevInstance: inst,
			Profile: "nvme", Pipeline: "nvme", PlannedSteps: []string{"sanitize"}, Trigger: "bench"})
		steps = append(steps, err)
		if err == nil {
			step, err := st.StepStarted(ctx, claims.StepStart{RunID: run.ID, Name: "sanitize"})
			steps = append(steps, err)
			if err == nil {
				steps = append(steps, st.StepFinished(ctx, run.ID, step.Seq, claims.StepResult{Outcome: claims.StepOK}),
					st.FinishRun(ctx, run.ID, claims.RunCleaned, "clean"))
			}
		}
		clk.Add(time.Second)
		for _, err := range steps {
			if err != nil {
				b.Fatalf("device %s history: %v", rp, err)
			}
		}
	}
	_, rec, err := handlers.New(handlers.Config{Host: "compute-1", FollowUpDelay: -1},
		handlers.Deps{Placement: &handlerstest.Placement{W: w}, Claims: c, Hardware: &handlerstest.Hardware{},
			Cleaner: &handlerstest.Cleaner{W: w}, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	if err := rec.Scan(ctx, "start"); err != nil {
		b.Fatal(err)
	}
	if t, held, err := c.PreviousTenant(ctx, "rp-0"); err != nil || held {
		b.Fatalf("rp-0 after its clean: tenant %+v held %v (%v); want cleaned since", t, held, err)
	}
	return rec
}
