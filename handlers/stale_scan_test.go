package handlers_test

import (
	"context"
	"github.com/scour-project/scour/pipeline"
	"testing"
	"time"

	"github.com/scour-project/scour/handlers"
)

// A scan whose Placement snapshot was read while a run was in flight, and
// that classifies after the run ended, sees the device as it was before
// the verdict (dirty, no quarantine trait yet). It must not start another
// run on that stale view: the quarantined device would be cleaned again
// (or a returned one wiped, if nothing else stopped it).
func TestScanDoesNotActOnSnapshotOlderThanARunsEnd(t *testing.T) {
	t.Parallel()
	for _, verdict := range []pipeline.Verdict{pipeline.VerdictQuarantine, pipeline.VerdictClean} {
		t.Run(string(verdict), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
			started, release := make(chan struct{}, 4), make(chan struct{})
			e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
				started <- struct{}{}
				<-release
				return handlers.CleanResult{Verdict: verdict, RunID: "run-1", Detail: "because"}, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.r.Scan(ctx, "first"); err != nil {
				t.Fatal(err)
			}
			<-started // the run is in flight

			// The second scan reads Placement now (device still dirty), and
			// the run finishes before the scan acts on what it read.
			e.p.ScanHostF = func(ctx context.Context) ([]handlers.Device, error) {
				stale, err := e.w.ScanHost(ctx)
				close(release)
				if werr := e.r.WaitIdle(ctx); werr != nil {
					t.Errorf("WaitIdle: %v", werr)
				}
				return stale, err
			}
			if err := e.r.Scan(ctx, "stale"); err != nil {
				t.Fatal(err)
			}
			if err := e.r.WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.cl.CallsFor(rp(1)); got != 1 {
				t.Fatalf("runs = %d after a scan with a snapshot older than the verdict, want 1", got)
			}
			// A fresh scan sees the verdict and leaves the device alone too.
			e.p.ScanHostF = nil
			e.reconcile()
			if got := e.cl.CallsFor(rp(1)); got != 1 {
				t.Fatalf("runs = %d after a fresh scan, want 1", got)
			}
		})
	}
}
