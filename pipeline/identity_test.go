package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// visibleSerial shows serial on any driver (VPD, or a backend that
// remembers it).
func visibleSerial(serial *string) func(*harness) {
	return func(h *harness) {
		h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			dev := nvmeDevice(a)
			dev.Serial, dev.Model = *serial, "PM9A3"
			return dev, nil
		}
	}
}

// seedFor stores an open run for the drive with serial, its first n
// steps succeeded.
func seedFor(t *testing.T, h *harness, cfg Config, tg Target, serial string, n int) Run {
	t.Helper()
	states := make([]StepState, n)
	for i := range states {
		states[i] = StepSucceeded
	}
	run := seed(t, h.cp, cfg, tg, states...)
	if err := h.cp.SetIdentity(context.Background(), run.ID, serial, "PM9A3", ""); err != nil {
		t.Fatal(err)
	}
	return run
}

// A run opened for drive OLD, interrupted after its erase, is not resumed
// for the drive NEW found in the slot when scourd starts again: OLD's
// erase must not count for NEW. The old run is closed, saying why, and a
// new one runs every step.
func TestResumeOfReplacedDriveStartsOver(t *testing.T) {
	cfg := testConfig(pluginStep("erase"), pluginStep("verify"))
	for _, tc := range []struct {
		name    string
		serial  string
		resumes bool
	}{
		{"same drive", "OLD", true},
		{"replaced drive", "NEW", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, cfg, visibleSerial(&tc.serial))
			tg := target(1)
			old := seedFor(t, h, cfg, tg, "OLD", 1)
			res := h.clean(t, tg)
			if res.Verdict != VerdictClean || (res.RunID == old.ID) != tc.resumes || res.Serial != tc.serial {
				t.Fatalf("result %v in run %s (serial %q); old run %s, want resumed=%v", res, res.RunID, res.Serial, old.ID, tc.resumes)
			}
			want := []string{"CLEAN verify"}
			if !tc.resumes {
				want = []string{"CLEAN erase", "CLEAN verify"}
			}
			if got := h.pr.Calls(); !slices.Equal(got, want) {
				t.Fatalf("calls %v, want %v", got, want)
			}
			if tc.resumes {
				return
			}
			sup, ok := h.cp.Result(old.ID)
			if !ok || sup.Clean() || !strings.Contains(sup.Reason, `serial "NEW", not "OLD"`) || !strings.Contains(sup.Reason, "replaced") {
				t.Fatalf("old run finished %v (%v); want not clean, saying the drive was replaced", sup, ok)
			}
		})
	}
}

// The home driver shows no serial (NVMe on vfio-pci, a fresh scourd), so
// the resumed run cannot tell at its start; the first step bound to nvme
// shows NEW where the run recorded OLD. The run stops there without a
// clean verdict, keeping OLD in its record; the next run starts over.
func TestReplacedDriveSeenOnStepDriverStopsRun(t *testing.T) {
	nvme := func(s *Step) { s.Driver = "nvme" }
	cfg := testConfig(pluginStep("erase", nvme), pluginStep("verify", nvme))
	drive := &driverSim{driver: "vfio-pci", serial: "NEW"}
	h := newHarness(t, cfg, drive.install)
	tg := target(1)
	old := seedFor(t, h, cfg, tg, "OLD", 1)

	res := h.clean(t, tg)
	if res.Verdict != VerdictRetryLater || res.Clean() || res.RunID != old.ID || res.Step != "verify" || res.Serial != "OLD" ||
		!strings.Contains(res.Reason, `serial "NEW"`) || !strings.Contains(res.Reason, `not "OLD"`) {
		t.Fatalf("result %v (serial %q); want retry-later at verify naming both serials", res, res.Serial)
	}
	if got := h.pr.Calls(); len(got) != 0 {
		t.Fatalf("calls %v: a step ran on the replaced drive", got)
	}
	recs := h.cp.Steps(old.ID)
	if len(recs) != 2 || recs[1].State != StepFailed || !strings.HasPrefix(recs[1].Message, "not run: ") {
		t.Fatalf("records %+v: want verify failed, not run", recs)
	}
	if runs := h.cp.Runs(string(tg.Address)); runs[0].Start.Serial != "OLD" {
		t.Fatalf("run's serial became %q: the record names the drive its steps ran on", runs[0].Start.Serial)
	}
	if drive.driver != "vfio-pci" {
		t.Fatalf("device left on %s", drive.driver)
	}

	res = h.clean(t, tg)
	if res.Verdict != VerdictClean || res.RunID == old.ID || res.Serial != "NEW" {
		t.Fatalf("next run: %v in %s (serial %q); want a new clean run of NEW", res, res.RunID, res.Serial)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN erase", "CLEAN verify"}) {
		t.Fatalf("calls %v, want every step again", got)
	}
}

// A fresh scourd knows an NVMe on vfio-pci by its PCI VPD serial, which
// need not be the string Identify Controller shows bound to nvme. That is
// no replaced drive: a new run adopts the controller's serial at its first
// step bound to nvme, and a resumed run whose record holds the
// controller's serial resumes. Two controller serials that differ still
// stop the run.
func TestVPDSerialIsNotComparedWithIdentifyController(t *testing.T) {
	nvme := func(s *Step) { s.Driver = "nvme" }
	cfg := testConfig(pluginStep("erase", nvme), pluginStep("verify", nvme))
	tg := target(1)

	t.Run("new run", func(t *testing.T) {
		h := newHarness(t, cfg, (&driverSim{driver: "vfio-pci", vpd: "ABC-1", serial: "ABC1      "}).install)
		res := h.clean(t, tg)
		if res.Verdict != VerdictClean || strings.TrimSpace(res.Serial) != "ABC1" {
			t.Fatalf("result %v (serial %q); want clean, naming the controller's serial", res, res.Serial)
		}
		if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN erase", "CLEAN verify"}) {
			t.Fatalf("calls %v", got)
		}
	})
	t.Run("resumed run", func(t *testing.T) {
		h := newHarness(t, cfg, (&driverSim{driver: "vfio-pci", vpd: "ABC-1", serial: "ABC1      "}).install)
		old := seedFor(t, h, cfg, tg, "ABC1      ", 1) // SetIdentity: the controller's serial
		res := h.clean(t, tg)
		if res.Verdict != VerdictClean || res.RunID != old.ID || strings.TrimSpace(res.Serial) != "ABC1" {
			t.Fatalf("result %v in run %s (serial %q); want run %s resumed and clean", res, res.RunID, res.Serial, old.ID)
		}
		if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN verify"}) {
			t.Fatalf("calls %v: want the erase not redone", got)
		}
	})
	t.Run("swapped, no step left to look on nvme", func(t *testing.T) {
		// The erase ran on nvme (the run holds the controller's serial);
		// only a home-driver step is left, and a fresh scourd sees the
		// VPD serial of another drive: nothing later would compare
		// serials again, so the run starts over on the new drive.
		cfg := testConfig(pluginStep("erase", nvme), pluginStep("reset"))
		h := newHarness(t, cfg, (&driverSim{driver: "vfio-pci", vpd: "NEW-2", serial: "NEW2"}).install)
		old := seedFor(t, h, cfg, tg, "ABC1      ", 1)
		res := h.clean(t, tg)
		if res.Verdict != VerdictClean || res.RunID == old.ID || strings.TrimSpace(res.Serial) != "NEW2" {
			t.Fatalf("result %v in run %s (serial %q); want a new run, clean, naming the new drive", res, res.RunID, res.Serial)
		}
		if got := h.pr.Calls(); !slices.Equal(got, []string{"CLEAN erase", "CLEAN reset"}) {
			t.Fatalf("calls %v: want the erase run again on the new drive", got)
		}
	})
	t.Run("other controller serial", func(t *testing.T) {
		h := newHarness(t, cfg, (&driverSim{driver: "vfio-pci", vpd: "ABC-1", serial: "XYZ9"}).install)
		old := seedFor(t, h, cfg, tg, "ABC1      ", 1)
		res := h.clean(t, tg)
		if res.Verdict != VerdictRetryLater || res.RunID != old.ID || res.Step != "verify" || !strings.Contains(res.Reason, "replaced") {
			t.Fatalf("result %v in run %s; want retry-later at verify, the drive replaced", res, res.RunID)
		}
		if got := h.pr.Calls(); len(got) != 0 {
			t.Fatalf("calls %v: a step ran on the replaced drive", got)
		}
	})
}
