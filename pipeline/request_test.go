package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// Plugins get device facts from local discovery and the caller's Placement
// facts; their stderr lands in the step record.
func TestPluginRequestAndStderr(t *testing.T) {
	h := newHarness(t, testConfig(pluginStep("a", func(s *Step) { s.Args = map[string]any{"passes": 2} }), pluginStep("b")))
	h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
		return []hardware.Media{{Path: "/dev/nvme0n1", Size: 1 << 30}}, nil
	}
	var got *plugins.Request
	h.pr.clean["a"] = func(_ context.Context, req *plugins.Request) (*plugins.Result, error) {
		got = req
		r := plugins.OK(map[string]any{"wiped": true})
		r.Stderr = "a says hello"
		return r, nil
	}
	h.pr.clean["b"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return nil, &plugins.Error{Code: plugins.CodePermanent, Msg: "b broke", Stderr: "b's last words"}
	}
	tg := target(1)
	tg.PreviousInstance, tg.PreviousProject, tg.RPName = "inst-9", "proj-9", "host_0000:01:00.0"
	res := h.clean(t, tg)
	if res.Verdict != VerdictQuarantine {
		t.Fatalf("result %v", res)
	}
	d := got.Device
	if d.Address != "0000:01:00.0" || d.Kind != "nvme" || d.VendorID != "0x144d" || d.Driver != "vfio-pci" ||
		d.Capabilities["pci.reset"] != true || len(d.Media) != 1 || d.Media[0].Path != "/dev/nvme0n1" ||
		d.ResourceClasses[0] != "CUSTOM_NVME" {
		t.Errorf("device %+v", d)
	}
	if got.Step != "a" || got.ResourceProvider.UUID != "rp-1" || got.ResourceProvider.Name != "host_0000:01:00.0" ||
		got.Previous == nil || got.Previous.Instance != "inst-9" || got.Args["passes"] != 2 {
		t.Errorf("request %+v", got)
	}
	if res.Steps[0].Stderr != "a says hello" || res.Steps[0].Details["wiped"] != true ||
		res.Steps[1].Stderr != "b's last words" || res.Steps[1].Message != "b broke" {
		t.Errorf("records %+v", res.Steps)
	}
}

// TestMediaErrorFailsPluginStep: only ErrUnsupported means "no media",
// and only for a device that is not an NVMe or a step that neither wipes
// nor verifies; any other failure to list the device's block devices
// fails the step as retryable (even with on_unsupported: skip) instead of
// handing the plugin an empty media list it could "wipe" successfully.
// An NVMe whose namespaces cannot be listed (a tenant detached every one
// of them: the real backend says ErrUnsupported) fails a wiping or
// verifying plugin step permanently, the plugin never called (found in
// review, H1: it answered ok over an empty SCOUR_MEDIA).
func TestMediaErrorFailsPluginStep(t *testing.T) {
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	quiet := func(s *Step) { s.Destructive = new(bool) }
	withCheck := func(h *harness) {
		h.pr.check["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) { return plugins.OK(nil), nil }
	}
	gpu := func(h *harness) {
		h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			d := nvmeDevice(a)
			d.Kind, d.Class = hardware.KindGPU, "0x030200"
			return d, nil
		}
	}
	tests := []struct {
		name     string
		mediaErr error
		mods     []func(*Step)
		hmod     func(*harness)
		want     Verdict
		code     int
		// ran: the step runs with no media and succeeds; the pipeline
		// (no-erase, the step erasing nothing) is then refused clean on
		// the NVMe (unerased), which is not this test's subject.
		ran bool
	}{
		{name: "unsupported means no media on a GPU", mediaErr: hardware.ErrUnsupported, hmod: gpu, want: VerdictClean},
		{name: "unsupported means no media for a step that touches none", mediaErr: hardware.ErrUnsupported, mods: []func(*Step){quiet}, ran: true},
		{name: "unsupported on an NVMe", mediaErr: hardware.ErrUnsupported, want: VerdictQuarantine, code: plugins.CodePermanent},
		{name: "unsupported on an NVMe at CHECK, skip step", mediaErr: hardware.ErrUnsupported, mods: []func(*Step){skip}, hmod: withCheck, want: VerdictQuarantine, code: plugins.CodePermanent},
		{name: "sysfs error at CLEAN", mediaErr: errBoom, want: VerdictRetryLater, code: plugins.CodeTryAgainLater},
		{name: "sysfs error, skip step", mediaErr: errBoom, mods: []func(*Step){skip}, want: VerdictRetryLater, code: plugins.CodeTryAgainLater},
		{name: "sysfs error at CHECK, skip step", mediaErr: errBoom, mods: []func(*Step){skip}, hmod: withCheck, want: VerdictRetryLater, code: plugins.CodeTryAgainLater},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, noEraseIfNone(testConfig(pluginStep("a", tc.mods...))))
			if tc.hmod != nil {
				tc.hmod(h)
			}
			h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) { return nil, tc.mediaErr }
			res := h.clean(t, target(1))
			if tc.ran {
				if states(res.Steps) != "a=succeeded" || !strings.Contains(res.Reason, "says category no-erase") {
					t.Fatalf("steps %s, verdict %s (%s); want step a run and succeeded, then no-erase refused on the NVMe", states(res.Steps), res.Verdict, res.Reason)
				}
				return
			}
			if res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s, steps %s); want %s", res.Verdict, res.Reason, states(res.Steps), tc.want)
			}
			if tc.want == VerdictClean {
				return
			}
			if res.Code != tc.code || !strings.Contains(res.Reason, "0000:01:00.0") {
				t.Fatalf("code %d reason %q; want code %d naming the device", res.Code, res.Reason, tc.code)
			}
			for _, c := range h.pr.Calls() {
				if c == "CLEAN a" {
					t.Fatalf("plugin ran without its media: calls %v", h.pr.Calls())
				}
			}
		})
	}
}

// TestZeroSizeMediaNeverReachesAPlugin: a namespace the kernel exposes
// with size 0 (an LBA format the block layer cannot use) can be neither
// written nor read; a plugin handed it could wipe nothing and answer ok.
// The step fails permanently naming it, before CHECK and CLEAN, even with
// on_unsupported: skip. Found in review (rev1 Medium 2).
func TestZeroSizeMediaNeverReachesAPlugin(t *testing.T) {
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	for _, withCheck := range []bool{false, true} {
		h := newHarness(t, testConfig(pluginStep("a", skip)))
		if withCheck {
			h.pr.check["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) { return plugins.OK(nil), nil }
		}
		h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
			return []hardware.Media{{Path: "/dev/nvme0n1", Size: 1 << 30}, {Path: "/dev/nvme0n2", Size: 0}}, nil
		}
		res := h.clean(t, target(1))
		if res.Verdict != VerdictQuarantine || res.Code != plugins.CodePermanent || !strings.Contains(res.Reason, "/dev/nvme0n2") || !strings.Contains(res.Reason, "size 0") {
			t.Fatalf("check=%v: verdict %s code %d (%s); want quarantine, code 12, naming /dev/nvme0n2", withCheck, res.Verdict, res.Code, res.Reason)
		}
		for _, c := range h.pr.Calls() {
			if strings.HasPrefix(c, "CLEAN") || strings.HasPrefix(c, "CHECK") {
				t.Fatalf("check=%v: plugin ran on a size-0 media: calls %v", withCheck, h.pr.Calls())
			}
		}
	}
}

// The size-0 check is for steps that touch the media: a step neither
// destructive nor verifying (a firmware query, a reset) runs and gets
// the media as listed; a verifying one after it still fails permanently
// naming the media. Found in review (rev3 L3): before, any plugin step
// failed.
func TestZeroSizeMediaFailsOnlyStepsThatTouchIt(t *testing.T) {
	quiet := func(s *Step) { s.Destructive = new(bool) }
	verifies := func(s *Step) { s.Destructive, s.Verifies = new(bool), true }
	cfg := testConfig(pluginStep("query", quiet), pluginStep("verify", verifies))
	cfg.Profiles[0].Pipeline.Category = CategoryNoErase // neither step erases
	h := newHarness(t, cfg)
	var got []plugins.Media
	h.pr.clean["query"] = func(_ context.Context, req *plugins.Request) (*plugins.Result, error) {
		got = req.Device.Media
		return plugins.OK(nil), nil
	}
	h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
		return []hardware.Media{{Path: "/dev/nvme0n1", Size: 1 << 30}, {Path: "/dev/nvme0n2", Size: 0}}, nil
	}
	res := h.clean(t, target(1))
	if len(got) != 2 || got[1].Path != "/dev/nvme0n2" || got[1].Size != 0 {
		t.Fatalf("non-destructive, non-verifying step got media %+v (calls %v); want it run with both, nvme0n2 at size 0", got, h.pr.Calls())
	}
	if res.Verdict != VerdictQuarantine || res.Code != plugins.CodePermanent || !strings.Contains(res.Reason, "step verify not run") || !strings.Contains(res.Reason, "/dev/nvme0n2") {
		t.Fatalf("verdict %s code %d (%s); want the verifying step failed permanently, naming /dev/nvme0n2", res.Verdict, res.Code, res.Reason)
	}
}

// hiddenNSBackend is fakehw's backend with the real backend's
// hidden-namespace check (hardware.Real.CheckHiddenNamespaces), answering
// details and err and recording what asked.
type hiddenNSBackend struct {
	*fakehw.Backend
	details map[string]any
	err     error
	mu      sync.Mutex
	asked   []string
}

func (b *hiddenNSBackend) CheckHiddenNamespaces(_ context.Context, _ hardware.Address, erase string) (map[string]any, error) {
	b.mu.Lock()
	b.asked = append(b.asked, erase)
	b.mu.Unlock()
	return b.details, b.err
}

func (b *hiddenNSBackend) Asked() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.asked)
}

// TestPluginStepChecksHiddenNamespaces: a plugin is handed only the
// namespaces attached to the NVMe controller (SCOUR_MEDIA), so a tenant
// that created a second namespace, wrote it and detached it would keep
// its data behind the plugin's ok, the built-in verify's pass (it reads
// the attached ones too) and a clean verdict. Before a plugin step that
// wipes or verifies, the pipeline makes the built-in overwrite's
// hidden-namespace check: a hidden namespace fails the step permanently
// (quarantine), a check that could not be made (an error, or one the
// backend reports as not made) fails it as try-again-later, and in
// neither case is the plugin called (CHECK nor CLEAN). A check that
// finds none lets the step run and is recorded in its details. Found in
// review (H1).
func TestPluginStepChecksHiddenNamespaces(t *testing.T) {
	hidden := fmt.Errorf("plugin step wipe 0000:01:00.0: NSIDs 0x2 are allocated but not attached to nvme0: %w", hardware.ErrHiddenNamespaces)
	verifies := func(s *Step) { s.Destructive, s.Verifies = new(bool), true }
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	tests := []struct {
		name    string
		details map[string]any
		err     error
		mods    []func(*Step)
		verdict Verdict
		code    int
		says    string
	}{
		{name: "hidden namespace", err: hidden, verdict: VerdictQuarantine, code: plugins.CodePermanent, says: "NSIDs 0x2"},
		{name: "hidden namespace, verifying plugin", err: hidden, mods: []func(*Step){verifies}, verdict: VerdictQuarantine, code: plugins.CodePermanent, says: "NSIDs 0x2"},
		{name: "hidden namespace, on_unsupported skip", err: hidden, mods: []func(*Step){skip}, verdict: VerdictQuarantine, code: plugins.CodePermanent, says: "NSIDs 0x2"},
		{name: "check failed", err: fmt.Errorf("plugin step wipe 0000:01:00.0: list namespaces (namespace management is on, oacs bit 3): %w", errBoom),
			verdict: VerdictRetryLater, code: plugins.CodeTryAgainLater, says: "could not be checked"},
		{name: "check reported not made", details: map[string]any{hardware.HiddenNamespacesCheckedKey: false, hardware.HiddenNamespacesNoteKey: "nvme list-ctrl: exit status 1"},
			verdict: VerdictRetryLater, code: plugins.CodeTryAgainLater, says: "could not be checked"},
	}
	for _, tc := range tests {
		for _, withCheck := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/CHECK=%v", tc.name, withCheck), func(t *testing.T) {
				var be *hiddenNSBackend
				h := newHarness(t, noEraseIfNone(testConfig(pluginStep("wipe", tc.mods...))), func(h *harness) {
					h.backend = func(f *fakehw.Backend) hardware.Backend {
						be = &hiddenNSBackend{Backend: f, details: tc.details, err: tc.err}
						return be
					}
				})
				if withCheck {
					h.pr.check["wipe"] = func(context.Context, *plugins.Request) (*plugins.Result, error) { return plugins.OK(nil), nil }
				}
				h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
					return []hardware.Media{{Path: "/dev/nvme0n1", Size: 1 << 30}}, nil
				}
				res := h.clean(t, target(1))
				if res.Verdict != tc.verdict || res.Code != tc.code || !strings.Contains(res.Reason, "step wipe") ||
					!strings.Contains(res.Reason, "0000:01:00.0") || !strings.Contains(res.Reason, tc.says) {
					t.Fatalf("verdict %s code %d (%s); want %s, code %d, naming the step, the device and %q", res.Verdict, res.Code, res.Reason, tc.verdict, tc.code, tc.says)
				}
				if calls := h.pr.Calls(); len(calls) != 0 {
					t.Fatalf("the plugin was called without the hidden-namespace check passing: %v", calls)
				}
				if asked := be.Asked(); len(asked) == 0 || asked[0] != "plugin step wipe" {
					t.Fatalf("hidden-namespace check asked %v; want it asked for plugin step wipe", asked)
				}
			})
		}
	}
}

// TestPluginStepRecordsTheHiddenNamespaceCheck: a check that finds no
// hidden namespace lets the plugin run and goes into the step's record,
// the plugin's own keys kept; a step that neither wipes nor verifies, and
// a device that is not an NVMe, are not checked.
func TestPluginStepRecordsTheHiddenNamespaceCheck(t *testing.T) {
	quiet := func(s *Step) { s.Destructive = new(bool) }
	checked := map[string]any{hardware.HiddenNamespacesCheckedKey: true, hardware.HiddenNamespacesNoteKey: "NSIDs 0x3 are attached to other controllers"}
	var be *hiddenNSBackend
	h := newHarness(t, testConfig(pluginStep("query", quiet), pluginStep("wipe")), func(h *harness) {
		h.backend = func(f *fakehw.Backend) hardware.Backend {
			be = &hiddenNSBackend{Backend: f, details: checked}
			return be
		}
	})
	h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
		return []hardware.Media{{Path: "/dev/nvme0n1", Size: 1 << 30}}, nil
	}
	h.pr.clean["wipe"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return plugins.OK(map[string]any{"bytes": 1 << 30, hardware.HiddenNamespacesCheckedKey: "the plugin's word"}), nil
	}
	res := h.clean(t, target(1))
	if res.Verdict != VerdictClean {
		t.Fatalf("verdict %s (%s); want clean", res.Verdict, res.Reason)
	}
	if asked := be.Asked(); !slices.Equal(asked, []string{"plugin step wipe", "plugin step wipe"}) {
		t.Fatalf("hidden-namespace check asked %v; want it for the wiping step only, before its CHECK and again before its CLEAN", asked)
	}
	d := res.Steps[1].Details
	if d[hardware.HiddenNamespacesCheckedKey] != true || d[hardware.HiddenNamespacesNoteKey] != checked[hardware.HiddenNamespacesNoteKey] || d["bytes"] != 1<<30 {
		t.Fatalf("wipe's details %v; want the check's keys (scour's word) beside the plugin's", d)
	}
	if _, ok := res.Steps[0].Details[hardware.HiddenNamespacesCheckedKey]; ok {
		t.Fatalf("query's details %v: a step that touches no media was checked", res.Steps[0].Details)
	}

	gpu := newHarness(t, testConfig(pluginStep("wipe")), func(h *harness) {
		h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			d := nvmeDevice(a)
			d.Kind, d.Class = hardware.KindGPU, "0x030200"
			return d, nil
		}
		h.backend = func(f *fakehw.Backend) hardware.Backend {
			be = &hiddenNSBackend{Backend: f, err: errBoom}
			return be
		}
	})
	if res := gpu.clean(t, target(1)); res.Verdict != VerdictClean || len(be.Asked()) != 0 {
		t.Fatalf("GPU: verdict %s (%s), check asked %v; want clean, never asked", res.Verdict, res.Reason, be.Asked())
	}
}

// noEraseIfNone says category no-erase for a test pipeline of steps that
// erase nothing (a plugin with destructive: false), which Validate
// refuses otherwise: these tests look at the plugin step alone.
func noEraseIfNone(c Config) Config {
	for _, s := range c.Profiles[0].Pipeline.Steps {
		if s.Destructive == nil || *s.Destructive {
			return c
		}
	}
	c.Profiles[0].Pipeline.Category = CategoryNoErase
	return c
}
