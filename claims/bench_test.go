package claims

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkStore measures the operations on scour's hot paths on both
// backends: a claim write (one notification), a claim read (a release
// looking up the instance's devices) and a run checkpoint (StepStarted +
// StepFinished around one pipeline step). `make bench-claims` prints the
// PostgreSQL/sqlite ratio per operation.
func BenchmarkStore(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			s := mustOpen(b, be.cfg(b))
			b.Run("claim_write", func(b *testing.B) {
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
				for i := 0; i < b.N; i++ {
					st, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "step"})
					if err == nil {
						err = s.StepFinished(ctx, run.ID, st.Seq, StepResult{Outcome: StepOK, Output: "done"})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
