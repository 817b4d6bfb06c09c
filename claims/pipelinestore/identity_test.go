package pipelinestore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// A run interrupted after its erase on drive OLD is not resumed for the
// drive NEW found in the slot after the restart: the stored run gives the
// engine the serial it was opened for, the old run is closed failed
// saying the drive was replaced, and a new run of NEW repeats every step.
func TestEngineDoesNotResumeRunOfReplacedDrive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(step("sanitize", true), step("verify", true))
	interruptAtVerify(t, cfg, openStore(t, dir), nvmeWithSerial("OLD"), nil)

	// The drive was swapped while scourd was down.
	s := openStore(t, dir)
	pr2 := &fakePlugins{}
	res, err := engineOn(t, cfg, s, pr2, nvmeWithSerial("NEW")).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictClean || res.Serial != "NEW" {
		t.Fatalf("Clean = %+v, %v", res, err)
	}
	if got := pr2.Calls(); !slices.Equal(got, []string{"sanitize", "verify"}) {
		t.Fatalf("calls %v: want every step again on the new drive", got)
	}
	if r, _ := s.GetRun(context.Background(), res.RunID); r.Serial != "NEW" || r.State != claims.RunCleaned {
		t.Fatalf("new run = %+v", r)
	}
	if r := supersededBy(t, s, res.RunID); r.Serial != "OLD" || r.State != claims.RunFailed || !strings.Contains(r.Summary, "replaced") {
		t.Fatalf("old run = %+v; want failed, serial OLD, saying the drive was replaced", r)
	}
}

// interruptAtVerify runs cfg's pipeline (sanitize, verify) on the device
// be discovers, asking alloc (engineWith), until scourd shuts down during
// verify, and closes s: the run stays open, its sanitize done.
func interruptAtVerify(t *testing.T, cfg pipeline.Config, s *claims.Store, be *fakehw.Backend, alloc pipeline.AllocationChecker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"verify": func(ctx context.Context) (*plugins.Result, error) { cancel(); <-ctx.Done(); return nil, ctx.Err() },
	}}
	if res, err := engineWith(t, cfg, s, pr, be, alloc).Clean(ctx, target); err == nil {
		t.Fatalf("shutdown mid-step returned a verdict: %+v", res)
	}
	s.Close()
}

// supersededBy returns the device's one run other than runID, failing
// unless the device has exactly those two.
func supersededBy(t *testing.T, s *claims.Store, runID string) claims.Run {
	t.Helper()
	runs, _ := s.ListRuns(context.Background(), claims.RunFilter{Device: target.RPUUID})
	if len(runs) != 2 {
		t.Fatalf("runs = %+v; want the interrupted one closed and a new one", runs)
	}
	if runs[0].ID == runID {
		return runs[1]
	}
	return runs[0]
}

// TestRecordNamesFirmwareSeenByTheStep: discovery on vfio-pci names the
// firmware the backend remembered from before the tenant (A); the tenant
// updated it through passthrough, and the step bound to nvme sees B. The
// record names B, the firmware the cleaning actually met.
func TestRecordNamesFirmwareSeenByTheStep(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	be := rebindable("vfio-pci", func(d *hardware.Device) {
		d.Serial, d.Model, d.Firmware = "S1", "PM9A3", "A" // remembered (hardware.NVMeMemo)
		if d.Driver == "nvme" {
			d.Firmware = "B"
		}
	})
	st := step("wipe", true)
	st.Driver = "nvme"
	res, err := engineOn(t, config(st), s, &fakePlugins{}, be).Clean(ctx, target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("Clean = %+v, %v", res, err)
	}
	rec, err := s.Record(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Device.Firmware != "B" || rec.Device.Serial != "S1" {
		t.Fatalf("record device %+v: want firmware B (seen bound to nvme), serial S1", rec.Device)
	}
}

// The store keeps where a run's serial came from across a restart, so a
// resumed run compares like with like: a VPD serial stays "vpd", and the
// serial a step's driver showed (SetIdentity) is the driver's.
func TestSerialSourceSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	cp := &Checkpoints{Store: s, Host: "compute-1", Trigger: "test"}
	ctx := context.Background()
	start := pipeline.RunStart{Device: string(target.Address), RPUUID: target.RPUUID, Profile: "p", Pipeline: "nvme", PipelineVersion: 1,
		Steps: []string{"erase"}, Serial: "ABC-1", SerialSource: hardware.SerialFromVPD, Model: "PM9A3"}
	run, _, err := cp.OpenRun(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if run, _, err = cp.OpenRun(ctx, start); err != nil || run.Start.SerialSource != hardware.SerialFromVPD {
		t.Fatalf("resumed run %+v, %v: want serial source vpd", run.Start, err)
	}
	if err := cp.SetIdentity(ctx, run.ID, "ABC1      ", "PM9A3", ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cp.Store = openStore(t, dir)
	if run, _, err = cp.OpenRun(ctx, start); err != nil || run.Start.Serial != "ABC1      " || run.Start.SerialSource != "" {
		t.Fatalf("resumed run %+v, %v: want the driver's serial, source \"\"", run.Start, err)
	}
}
