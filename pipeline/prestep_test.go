package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// waitFor waits for ch to close, at most a while: a fake that waits for
// the other check of a step gives up, rather than hang a test, when the
// engine runs the checks one after the other.
func waitFor(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// The CHECK of a destructive step and its Placement check run side by
// side: each fake waits for the other to have started, which two checks
// in series never see (the first gives up and the run is not clean).
func TestCheckAndPlacementRunTogether(t *testing.T) {
	checkStarted, placementAsked := make(chan struct{}), make(chan struct{})
	h := newHarness(t, testConfig(pluginStep("wipe")), func(h *harness) {
		h.alloc = func(context.Context, string) (bool, error) {
			close(placementAsked)
			if !waitFor(checkStarted) {
				return false, errors.New("the step's CHECK did not start while Placement was being asked")
			}
			return false, nil
		}
	})
	h.e.placementAnswerMaxAge = time.Hour // one answer: the fake closes its channel once
	h.pr.check["wipe"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		close(checkStarted)
		if !waitFor(placementAsked) {
			return nil, plugins.Errorf(plugins.CodeTryAgainLater, "Placement was not asked while the CHECK ran")
		}
		return plugins.OK(nil), nil
	}
	res := h.clean(t, target(1))
	if res.Verdict != VerdictClean {
		t.Fatalf("result %v: the CHECK and the Placement check did not run together", res)
	}
	if got := h.pr.Calls(); !slices.Equal(got, []string{"CHECK wipe", "CLEAN wipe"}) {
		t.Fatalf("calls %v", got)
	}
}

// What a destructive step's CHECK and Placement check decide together:
// Placement's "in use" (or no answer) stops the run whatever the CHECK
// said, and the step is not recorded; with Placement's all-clear the
// CHECK's outcome is the step's, as when the two ran one after the other.
func TestPlacementDecidesBeforeTheCheck(t *testing.T) {
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	unsupported := func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "not this model")
	}
	broken := func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return nil, plugins.Errorf(plugins.CodeTryAgainLater, "CHECK could not read the device")
	}
	for _, tc := range []struct {
		name      string
		step      Step
		check     func(context.Context, *plugins.Request) (*plugins.Result, error)
		alloc     func(context.Context, string) (bool, error)
		want      Verdict
		wantCode  int
		wantSteps string // the run's stored step records
	}{
		{name: "in use wins over an unsupported CHECK", step: pluginStep("wipe"), check: unsupported,
			alloc: func(context.Context, string) (bool, error) { return true, nil }, want: VerdictAborted},
		{name: "in use wins over an unsupported CHECK that skips", step: pluginStep("wipe", skip), check: unsupported,
			alloc: func(context.Context, string) (bool, error) { return true, nil }, want: VerdictAborted},
		{name: "no answer wins over a failed CHECK", step: pluginStep("wipe"), check: broken,
			alloc: func(context.Context, string) (bool, error) { return false, errBoom }, want: VerdictRetryLater},
		{name: "clear, CHECK unsupported: the step fails", step: pluginStep("wipe"), check: unsupported,
			want: VerdictQuarantine, wantCode: plugins.CodeUnsupported, wantSteps: "wipe=failed"},
		{name: "clear, CHECK unsupported: the step skips", step: pluginStep("wipe", skip), check: unsupported,
			// Skipped, but the run then refuses clean: nothing erased the device.
			want: VerdictQuarantine, wantCode: plugins.CodePermanent, wantSteps: "wipe=skipped"},
		{name: "clear, CHECK fails: the step fails with its code", step: pluginStep("wipe"), check: broken,
			want: VerdictRetryLater, wantCode: plugins.CodeTryAgainLater, wantSteps: "wipe=failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			h := newHarness(t, testConfig(tc.step), func(h *harness) {
				if tc.alloc != nil {
					h.alloc = tc.alloc
				}
				inner := h.alloc
				h.alloc = func(ctx context.Context, rp string) (bool, error) { asked++; return inner(ctx, rp) }
			})
			h.pr.check["wipe"] = tc.check
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || res.Code != tc.wantCode {
				t.Fatalf("result %v code %d, want %s code %d", res, res.Code, tc.want, tc.wantCode)
			}
			if got := states(h.cp.Steps(res.RunID)); got != tc.wantSteps {
				t.Fatalf("stored steps %q, want %q", got, tc.wantSteps)
			}
			if asked != 1 {
				t.Fatalf("Placement asked %d times, want once", asked)
			}
			if got := h.pr.Calls(); !slices.Equal(got, []string{"CHECK wipe"}) {
				t.Fatalf("calls %v: want the CHECK alone", got)
			}
			if tc.want == VerdictAborted && (res.Step != "wipe" || !strings.Contains(res.Reason, "without touching the device")) {
				t.Fatalf("result %v: want aborted at wipe, without touching the device", res)
			}
		})
	}
}

// A CHECK still running when Placement says the device is in use is
// cancelled, and has returned (its process killed: plugins/runner) by
// the time the run ends.
func TestCheckCancelledWhenPlacementSaysInUse(t *testing.T) {
	checkStarted := make(chan struct{})
	var cancelled, returned atomic.Bool
	h := newHarness(t, testConfig(pluginStep("wipe")), func(h *harness) {
		h.alloc = func(context.Context, string) (bool, error) {
			waitFor(checkStarted)
			return true, nil
		}
	})
	h.pr.check["wipe"] = func(ctx context.Context, _ *plugins.Request) (*plugins.Result, error) {
		defer returned.Store(true)
		close(checkStarted)
		select {
		case <-ctx.Done():
			cancelled.Store(true)
			time.Sleep(50 * time.Millisecond) // as the runner's kill and reap of the process group take a moment
			return nil, plugins.Errorf(plugins.CodeTryAgainLater, "cancelled")
		case <-time.After(10 * time.Second):
			return plugins.OK(nil), nil
		}
	}
	res := h.clean(t, target(1))
	if res.Verdict != VerdictAborted || res.Step != "wipe" {
		t.Fatalf("result %v, want aborted at wipe", res)
	}
	if !cancelled.Load() || !returned.Load() {
		t.Fatalf("CHECK cancelled %v, returned before the run ended %v: want both", cancelled.Load(), returned.Load())
	}
	if got := states(h.cp.Steps(res.RunID)); got != "" {
		t.Fatalf("stored steps %q: the cancelled CHECK's outcome was recorded", got)
	}
	if got := h.pr.Calls(); slices.Contains(got, "CLEAN wipe") {
		t.Fatalf("calls %v: the step ran", got)
	}
}

// A CHECK that outlasts Placement's answer by more than
// placementAnswerMaxAge has Placement asked again before the step: an
// allocation made while the CHECK ran stops it.
func TestPlacementAskedAgainAfterASlowCheck(t *testing.T) {
	asked := 0
	// In-device: no host slot (whose own check would come first), so the
	// attempt's is the one asked.
	h := newHarness(t, testConfig(pluginStep("wipe", inDevice)), func(h *harness) {
		h.alloc = func(context.Context, string) (bool, error) { asked++; return asked > 1, nil }
	})
	h.e.placementAnswerMaxAge = 0 // any CHECK outlasts the answer
	res := h.clean(t, target(1))
	if res.Verdict != VerdictAborted || res.Step != "wipe" || asked != 2 {
		t.Fatalf("result %v, Placement asked %d times: want aborted at wipe after asking twice", res, asked)
	}
	if got := h.pr.Calls(); slices.Contains(got, "CLEAN wipe") {
		t.Fatalf("calls %v: the step ran on a stale answer", got)
	}
	t.Run("a fresh answer is not asked again", func(t *testing.T) {
		asked := 0
		h := newHarness(t, testConfig(pluginStep("wipe")), func(h *harness) {
			h.alloc = func(context.Context, string) (bool, error) { asked++; return false, nil }
		})
		h.e.placementAnswerMaxAge = time.Hour
		if res := h.clean(t, target(1)); res.Verdict != VerdictClean || asked != 1 {
			t.Fatalf("result %v, Placement asked %d times: want clean after asking once", res, asked)
		}
	})
}

// An all-clear is as old as the request it came from: a checker that
// answers from an earlier read (placement.Gate reusing a release's read)
// says when that read began, and one placementAnswerMaxAge old or more
// is asked again before the step, however quick the CHECK was.
func TestOldAnswerAskedAgainBeforeTheStep(t *testing.T) {
	for _, tc := range []struct {
		name  string
		age   time.Duration
		asked int
		want  Verdict
	}{
		{name: "an answer from a read 2s old", age: 2 * time.Second, asked: 2, want: VerdictAborted},
		{name: "an answer from a read just begun", asked: 1, want: VerdictClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			h := newHarness(t, testConfig(pluginStep("wipe")), func(h *harness) {
				h.dated = func(context.Context, string) (bool, time.Time, error) {
					asked++
					if asked == 1 {
						return false, time.Now().Add(-tc.age), nil
					}
					return true, time.Now(), nil // allocated since that read
				}
			})
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || asked != tc.asked {
				t.Fatalf("result %v, Placement asked %d times: want %s after asking %d times", res, asked, tc.want, tc.asked)
			}
			if ran := slices.Contains(h.pr.Calls(), "CLEAN wipe"); ran != (tc.want == VerdictClean) {
				t.Fatalf("calls %v: step ran %v, want %v", h.pr.Calls(), ran, tc.want == VerdictClean)
			}
		})
	}
}

// A destructive step that runs on another driver is cleared by Placement
// before the unbind (taking the device from its driver is as disruptive
// as the step), and asked again before its first attempt when that
// answer aged past placementAnswerMaxAge during the bind: an allocation
// made while the device was being bound stops the step, and the device
// goes home.
func TestRebindingStepAskedAgainAfterTheBind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		maxAge time.Duration
		asked  int
		want   Verdict
	}{
		// The bind takes 800 ms; the answer before it is a few
		// microseconds old at the unbind, far under 300 ms on any load.
		{name: "the bind outlasted the answer", maxAge: 300 * time.Millisecond, asked: 2, want: VerdictAborted},
		{name: "a fresh answer", maxAge: time.Hour, asked: 1, want: VerdictClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := &driverSim{driver: "vfio-pci"}
			asked, binds := 0, 0
			h := newHarness(t, testConfig(pluginStep("fmt", inDevice, func(s *Step) { s.Driver = "nvme" })), func(h *harness) {
				h.alloc = func(context.Context, string) (bool, error) { asked++; return asked > 1, nil }
			})
			sim.install(h)
			countBinds(h, "nvme", &binds, 800*time.Millisecond) // a slow driver probe
			h.e.placementAnswerMaxAge = tc.maxAge
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || asked != tc.asked {
				t.Fatalf("result %v, Placement asked %d times: want %s after asking %d times", res, asked, tc.want, tc.asked)
			}
			if ran := slices.Contains(h.pr.Calls(), "CLEAN fmt"); ran != (tc.want == VerdictClean) {
				t.Fatalf("calls %v: step ran %v, want %v", h.pr.Calls(), ran, tc.want == VerdictClean)
			}
			if sim.driver != "vfio-pci" {
				t.Fatalf("device left on %s, want it back on vfio-pci", sim.driver)
			}
			if binds != 1 {
				t.Fatalf("device bound to nvme %d times, want once (the second answer came after the bind)", binds)
			}
		})
	}
}

// The unbind of a step that runs on another driver, destructive or not,
// starts only on an all-clear younger than placementAnswerMaxAge:
// Placement is asked again while the answer is older (here every answer
// but the last comes from a read 2 s old), and after maxClearAsks such
// answers the run stops with retry-later, the device never unbound.
func TestUnbindAskedAgainOnAnOldAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fresh int // the answer that is fresh (0: none)
		asked int
		want  Verdict
	}{
		{name: "the second answer is fresh", fresh: 2, asked: 2, want: VerdictClean},
		{name: "every answer is old", asked: 1 + maxClearAsks, want: VerdictRetryLater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := &driverSim{driver: "vfio-pci"}
			asked, binds := 0, 0
			nondestructive := func(s *Step) { f := false; s.Destructive = &f; s.Driver = "nvme" }
			cfg := testConfig(pluginStep("wear", nondestructive))
			cfg.Profiles[0].Pipeline.Category = CategoryNoErase // one non-destructive step erases nothing
			h := newHarness(t, cfg, func(h *harness) {
				h.dated = func(context.Context, string) (bool, time.Time, error) {
					asked++
					if asked == tc.fresh {
						return false, time.Now(), nil
					}
					return false, time.Now().Add(-2 * time.Second), nil
				}
			})
			sim.install(h)
			asKind(h, hardware.KindNIC) // no-erase is for a device that holds no tenant data
			countBinds(h, "nvme", &binds, 0)
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || asked != tc.asked {
				t.Fatalf("result %v, Placement asked %d times: want %s after asking %d times", res, asked, tc.want, tc.asked)
			}
			if unbound := binds > 0; unbound != (tc.want == VerdictClean) {
				t.Fatalf("device bound to nvme %d times, want it bound only on a fresh answer", binds)
			}
			if sim.driver != "vfio-pci" {
				t.Fatalf("device left on %s, want it back on vfio-pci", sim.driver)
			}
		})
	}
}

// inDevice makes a step in-device: it takes no host-bound slot.
func inDevice(s *Step) { t := true; s.InDevice = &t }

// countBinds counts h's binds of the device to drv in n, each taking
// took, over what the backend's BindDriverF already does.
func countBinds(h *harness, drv string, n *int, took time.Duration) {
	bind := h.be.BindDriverF
	h.be.BindDriverF = func(ctx context.Context, a hardware.Address, to string) (string, error) {
		if to == drv {
			*n++
			time.Sleep(took)
		}
		return bind(ctx, a, to)
	}
}
