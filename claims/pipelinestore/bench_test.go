package pipelinestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/pipeline"
)

// BenchmarkCleaningRecord measures what the claims store costs one
// cleaning on scourd's path, through the engine's checkpoint interface:
// the instance's claim released, the run opened (naming the previous
// tenant), two steps each started, reporting progress and finished, the
// verdict stored and the run marked returned. It reports wall time and
// the process's CPU time (user + system) per cleaning; `make bench-claims`
// prints both.
func BenchmarkCleaningRecord(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, filepath.Join(b.TempDir(), "state"))
	cfg := config(step("erase", true), step("smart", false))
	cp := &Checkpoints{Store: s, Host: "compute-1", Trigger: "bench", Optional: optionalFrom(cfg)}
	steps := []string{"erase", "smart"}
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		inst, rp := fmt.Sprintf("inst-%d", i), fmt.Sprintf("rp-%d", i%16)
		if _, err := s.RecordClaim(ctx, claims.Claim{Host: "compute-1", InstanceUUID: inst, ProjectID: "proj",
			PCI: []claims.PCIDevice{{RPUUID: rp, Address: "0000:81:00.0"}}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := testkit.CPUTime(b)
		if _, err := s.ReleaseInstance(ctx, "compute-1", inst, "instance.delete.end", "m-"+inst); err != nil {
			b.Fatal(err)
		}
		run, _, err := cp.OpenRun(ctx, pipeline.RunStart{Device: "0000:81:00.0", RPUUID: rp, Profile: "nvme", Pipeline: "wipe",
			PipelineVersion: 2, Steps: steps})
		if err != nil {
			b.Fatal(err)
		}
		for j, name := range steps {
			rec := pipeline.StepRecord{Index: j, Name: name, State: pipeline.StepRunning, Started: time.Now()}
			if err := cp.StepStarted(ctx, run.ID, rec); err != nil {
				b.Fatal(err)
			}
			if err := cp.StepProgress(ctx, run.ID, j, 0.5); err != nil {
				b.Fatal(err)
			}
			rec.State, rec.Finished, rec.Message = pipeline.StepSucceeded, time.Now(), "done"
			if err := cp.StepFinished(ctx, run.ID, rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictClean}); err != nil {
			b.Fatal(err)
		}
		if err := s.MarkReturned(ctx, run.ID, "bench"); err != nil {
			b.Fatal(err)
		}
		cpu += testkit.CPUTime(b) - cpu0
		b.StopTimer()
	}
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
}
