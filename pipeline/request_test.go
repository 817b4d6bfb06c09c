package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
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

// TestMediaErrorFailsPluginStep: only ErrUnsupported means "no media"; any
// other failure to list the device's block devices fails the step as
// retryable (even with on_unsupported: skip) instead of handing the plugin
// an empty media list it could "wipe" successfully.
func TestMediaErrorFailsPluginStep(t *testing.T) {
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	withCheck := func(h *harness) {
		h.pr.check["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) { return plugins.OK(nil), nil }
	}
	tests := []struct {
		name     string
		mediaErr error
		mods     []func(*Step)
		hmod     func(*harness)
		want     Verdict
	}{
		{name: "unsupported means no media", mediaErr: hardware.ErrUnsupported, want: VerdictClean},
		{name: "sysfs error at CLEAN", mediaErr: errBoom, want: VerdictRetryLater},
		{name: "sysfs error, skip step", mediaErr: errBoom, mods: []func(*Step){skip}, want: VerdictRetryLater},
		{name: "sysfs error at CHECK, skip step", mediaErr: errBoom, mods: []func(*Step){skip}, hmod: withCheck, want: VerdictRetryLater},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(pluginStep("a", tc.mods...)))
			if tc.hmod != nil {
				tc.hmod(h)
			}
			h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) { return nil, tc.mediaErr }
			res := h.clean(t, target(1))
			if res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s, steps %s); want %s", res.Verdict, res.Reason, states(res.Steps), tc.want)
			}
			if tc.want == VerdictClean {
				return
			}
			if res.Code != plugins.CodeTryAgainLater || !strings.Contains(res.Reason, "0000:01:00.0") {
				t.Fatalf("code %d reason %q; want code 11 naming the device", res.Code, res.Reason)
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
	h := newHarness(t, testConfig(pluginStep("query", quiet), pluginStep("verify", verifies)))
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
