package claims

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/testkit"
)

// BenchmarkStore measures the operations on scour's hot paths on both
// backends: a claim write (one notification), a claim read (a release
// looking up the instance's devices), a run checkpoint (StepStarted +
// FinishStep around one pipeline step) and a whole cleaning's record (the
// store calls of one release of one device through its two-step pipeline
// to the un-reserve, as scourd makes them). Each reports wall time and
// the process's CPU time per operation; `make bench-claims` prints the
// PostgreSQL/sqlite ratio per operation.
func BenchmarkStore(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			s := mustOpen(b, be.cfg(b))
			b.Run("claim_write", func(b *testing.B) {
				defer reportCPU(b)()
				for i := 0; i < b.N; i++ {
					c := gpuClaim(fmt.Sprintf("bw-%d", i), fmt.Sprintf("rp-bw-%d", i))
					if _, err := s.RecordClaim(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
			})
			if _, err := s.RecordClaim(ctx, gpuClaim("br", "rp-br")); err != nil {
				b.Fatal(err)
			}
			b.Run("claim_read", func(b *testing.B) {
				defer reportCPU(b)()
				for i := 0; i < b.N; i++ {
					cs, err := s.ClaimsForInstance(ctx, "compute-1", "br")
					if err != nil || len(cs) != 1 {
						b.Fatal(len(cs), err)
					}
				}
			})
			run, _, err := s.OpenRun(ctx, nvmeRun())
			if err != nil {
				b.Fatal(err)
			}
			b.Run("run_checkpoint", func(b *testing.B) {
				defer reportCPU(b)()
				for i := 0; i < b.N; i++ {
					start := StepStart{RunID: run.ID, Name: "step"}
					_, err := s.StepStarted(ctx, start)
					if err == nil {
						err = s.FinishStep(ctx, start, StepResult{Outcome: StepOK, Output: "done"})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("cleaning_record", func(b *testing.B) {
				defer reportCPU(b)()
				for i := 0; i < b.N; i++ {
					if err := cleaningRecord(ctx, s, i); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// cleaningRecord makes the store calls of one cleaning, in scourd's
// order: a notification's claim (on one of 16 devices), its release, the
// run opened naming the previous tenant, two steps started and finished,
// the verdict, the un-reserve's mark.
func cleaningRecord(ctx context.Context, s *Store, i int) error {
	inst, rp := fmt.Sprintf("rec-%d", i), fmt.Sprintf("rp-rec-%d", i%16)
	c := gpuClaim(inst, rp)
	if _, err := s.RecordClaim(ctx, c); err != nil {
		return err
	}
	if _, err := s.ReleaseInstance(ctx, c.Host, inst, "instance.delete.end", "del-"+inst); err != nil {
		return err
	}
	rs := RunStart{Host: c.Host, DeviceRP: rp, Address: c.PCI[0].Address, Profile: "nvme", Pipeline: "wipe",
		PipelineVersion: "2", PlannedSteps: []string{"erase", "smart"}, Trigger: "bench"}
	prev, ok, err := s.PreviousTenant(ctx, c.Host, rp)
	if err != nil {
		return err
	}
	if ok {
		rs.PrevInstance, rs.PrevProject = prev.Instance, prev.Project
	}
	run, _, err := s.OpenRun(ctx, rs)
	if err != nil {
		return err
	}
	for j, name := range rs.PlannedSteps {
		st := StepStart{RunID: run.ID, Name: name, Index: j, Optional: j == 1}
		if _, err := s.StepStarted(ctx, st); err != nil {
			return err
		}
		if err := s.FinishStep(ctx, st, StepResult{Outcome: StepOK, Output: "done"}); err != nil {
			return err
		}
	}
	if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
		return err
	}
	return s.MarkReturned(ctx, run.ID, "un-reserved")
}

// reportCPU reports the process's CPU time (user + system) per operation
// from now until the returned func runs.
func reportCPU(b *testing.B) func() {
	start := testkit.CPUTime(b)
	return func() {
		b.ReportMetric(float64(testkit.CPUTime(b)-start)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
	}
}

// BenchmarkPreviousTenant reads a device's previous tenant (every
// cleaning does) with 100 and with 10,000 claims in the host's history,
// on sqlite; the two should cost the same (`make bench-claims` prints the
// ratio).
func BenchmarkPreviousTenant(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			s := mustOpen(b, backends[0].cfg(b))
			for i := 0; i < n; i++ {
				if _, err := s.RecordClaim(ctx, gpuClaim(fmt.Sprintf("hist-%d", i), fmt.Sprintf("rp-%d", i%16))); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			defer reportCPU(b)()
			for i := 0; i < b.N; i++ {
				if t, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-3"); err != nil || !ok || t.Instance == "" {
					b.Fatal(t, ok, err)
				}
			}
		})
	}
}
