package pipeline

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// driverSim is a device whose driver follows BindDriver calls; bindFails
// makes binds to that driver fail, lying makes binds to it report success
// without taking effect. serial is the drive's, shown bound to nvme only.
type driverSim struct {
	mu        sync.Mutex
	driver    string
	bindFails string
	lying     string
	serial    string
	vpd       string // the PCI VPD serial, shown on any other driver
}

func (d *driverSim) install(h *harness) {
	h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		dev := nvmeDevice(a)
		dev.Driver = d.driver
		if d.driver == "nvme" && d.serial != "" {
			dev.Serial, dev.Model = d.serial, "PM9A3"
		} else if d.vpd != "" {
			dev.Serial, dev.SerialSource = d.vpd, hardware.SerialFromVPD
		}
		return dev, nil
	}
	h.be.BindDriverF = func(_ context.Context, _ hardware.Address, drv string) (string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if drv == d.bindFails {
			return "", errBoom
		}
		if drv != d.lying {
			d.driver = drv
		}
		return d.driver, nil
	}
}

// TestDriverStepRestoresHomeDriverWhenAlreadyOnStepDriver: a device found
// on the step's driver (an earlier run's bind back failed, or a crash
// mid-step) is bound back to the home driver after the step, and a device
// that cannot be brought home never gets a clean verdict.
func TestDriverStepRestoresHomeDriverWhenAlreadyOnStepDriver(t *testing.T) {
	nvmeStep := func(s *Step) { s.Driver = "nvme" }
	tests := []struct {
		name       string
		sim        *driverSim
		want       Verdict
		wantDriver string
	}{
		{name: "found on step driver", sim: &driverSim{driver: "nvme"}, want: VerdictClean, wantDriver: "vfio-pci"},
		{name: "found home", sim: &driverSim{driver: "vfio-pci"}, want: VerdictClean, wantDriver: "vfio-pci"},
		{name: "bind back lies", sim: &driverSim{driver: "nvme", lying: "vfio-pci"}, want: VerdictRetryLater, wantDriver: "nvme"},
		{name: "bind back fails", sim: &driverSim{driver: "nvme", bindFails: "vfio-pci"}, want: VerdictRetryLater, wantDriver: "nvme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(pluginStep("fmt", nvmeStep), pluginStep("after")))
			tc.sim.install(h)
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || tc.sim.driver != tc.wantDriver {
				t.Fatalf("verdict %s (%s), driver %s; want %s on %s", res.Verdict, res.Reason, tc.sim.driver, tc.want, tc.wantDriver)
			}
			if tc.want != VerdictClean && !strings.Contains(res.Reason, "0000:01:00.0") {
				t.Fatalf("reason %q does not name the device", res.Reason)
			}
		})
	}
}

// TestHomeDriverCheckAfterResumedRun: a run resumed after a crash that
// left the device on the step's driver with the step recorded done must
// not end clean with the device there.
func TestHomeDriverCheckAfterResumedRun(t *testing.T) {
	sim := &driverSim{driver: "nvme", lying: "vfio-pci"}
	cfg := testConfig(pluginStep("fmt", func(s *Step) { s.Driver = "nvme" }), pluginStep("after"))
	h := newHarness(t, cfg)
	sim.install(h)
	tg := target(1)
	seed(t, h.cp, cfg, tg, StepSucceeded, StepSucceeded)
	res := h.clean(t, tg)
	if res.Verdict != VerdictRetryLater || !strings.Contains(res.Reason, `"nvme"`) || !strings.Contains(res.Reason, `"vfio-pci"`) {
		t.Fatalf("verdict %s (%s); want retry-later naming nvme and vfio-pci", res.Verdict, res.Reason)
	}
	if len(h.pr.Calls()) != 0 {
		t.Fatalf("resumed run re-ran steps: %v", h.pr.Calls())
	}
}

// TestNoHomeDriverCheckWithoutDriverSteps: pipelines without driver steps
// do not care which driver the device is on.
func TestNoHomeDriverCheckWithoutDriverSteps(t *testing.T) {
	sim := &driverSim{driver: "nvme"}
	h := newHarness(t, testConfig(pluginStep("a")))
	sim.install(h)
	if res := h.clean(t, target(1)); res.Verdict != VerdictClean {
		t.Fatalf("verdict %s (%s)", res.Verdict, res.Reason)
	}
}
