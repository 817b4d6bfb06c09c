package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// A run is clean only when an erasing step succeeded in it (unerased),
// whatever the category, except a pipeline that says it erases nothing
// (no-erase): an optional erase that failed, or every erase skipped,
// leaves the last tenant's data on the device. The verdict follows the
// erase's failure; every erase skipped is quarantine. A verifying plugin
// that passed is no erase (second review, M2).
func TestNoCleanWithoutAnErase(t *testing.T) {
	optional := func(s *Step) { f := false; s.Required = &f }
	skip := func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }
	quiet := func(s *Step) { s.Destructive = new(bool) }
	fails := func(code int) func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return func(context.Context, *plugins.Request) (*plugins.Result, error) {
			return nil, plugins.Errorf(code, "wipe failed")
		}
	}
	unsupported := func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "not this model")
	}
	// A verifying plugin (destructive by default) whose read-back passes:
	// it checks the media, it erases nothing (second review, M2).
	verifying := func(s *Step) { s.Verifies = true }
	passes := func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return plugins.OK(map[string]any{plugins.VerificationKey: map[string]any{"method": "read-back", "result": "passed"}}), nil
	}
	for _, tc := range []struct {
		name     string
		steps    []Step
		category string
		clean    func(context.Context, *plugins.Request) (*plugins.Result, error)
		check    func(context.Context, *plugins.Request) (*plugins.Result, error)
		// verify is the CLEAN of step "check".
		verify func(context.Context, *plugins.Request) (*plugins.Result, error)
		// nic: the device is a NIC (else an NVMe).
		nic  bool
		want Verdict
		code int
	}{
		{name: "optional erase failed, retryable", steps: []Step{pluginStep("wipe", optional), pluginStep("reset", quiet)},
			clean: fails(plugins.CodeTryAgainLater), want: VerdictRetryLater, code: plugins.CodeTryAgainLater},
		{name: "optional erase failed, permanent", steps: []Step{pluginStep("wipe", optional), pluginStep("reset", quiet)},
			clean: fails(plugins.CodePermanent), want: VerdictQuarantine, code: plugins.CodePermanent},
		{name: "the only erase skipped", steps: []Step{pluginStep("wipe", skip), pluginStep("reset", quiet)},
			check: unsupported, want: VerdictQuarantine, code: plugins.CodePermanent},
		{name: "erase succeeded", steps: []Step{pluginStep("wipe"), pluginStep("reset", quiet)}, want: VerdictClean},
		{name: "one erase skipped, another succeeded", steps: []Step{pluginStep("wipe", skip), pluginStep("wipe2")},
			check: unsupported, want: VerdictClean},
		{name: "a verifying plugin passed, the only erase skipped", steps: []Step{pluginStep("wipe", skip), pluginStep("check", verifying)},
			check: unsupported, verify: passes, want: VerdictQuarantine, code: plugins.CodePermanent},
		{name: "a verifying plugin passed after the erase", steps: []Step{pluginStep("wipe"), pluginStep("check", verifying)},
			verify: passes, want: VerdictClean},
		{name: "no-erase pipeline on a NIC", steps: []Step{pluginStep("reset", quiet)}, category: CategoryNoErase, nic: true, want: VerdictClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.steps...)
			cfg.Profiles[0].Pipeline.Category = tc.category
			h := newHarness(t, cfg)
			if tc.nic {
				asKind(h, hardware.KindNIC)
			}
			if tc.clean != nil {
				h.pr.clean["wipe"] = tc.clean
			}
			if tc.check != nil {
				h.pr.check["wipe"] = tc.check
			}
			if tc.verify != nil {
				h.pr.clean["check"] = tc.verify
			}
			res := h.clean(t, target(1))
			if res.Verdict != tc.want || res.Code != tc.code {
				t.Fatalf("verdict %s code %d (%s), want %s code %d", res.Verdict, res.Code, res.Reason, tc.want, tc.code)
			}
			if tc.want != VerdictClean && !strings.Contains(res.Reason, "no erasing step succeeded") {
				t.Fatalf("reason %q does not say no erasing step succeeded", res.Reason)
			}
		})
	}
}

// asKind makes the harness's device discovered as one of kind (and its
// PCI class), whatever its DiscoverF gave so far.
func asKind(h *harness, kind hardware.DeviceKind) {
	class := map[hardware.DeviceKind]string{hardware.KindNVMe: "0x010802", hardware.KindGPU: "0x030200",
		hardware.KindNIC: "0x020000", hardware.KindFPGA: "0x120000", hardware.KindGeneric: "0x058000"}[kind]
	discover := h.be.DiscoverF
	h.be.DiscoverF = func(ctx context.Context, a hardware.Address) (*hardware.Device, error) {
		d, err := discover(ctx, a)
		if d != nil {
			d.Kind, d.Class = kind, class
		}
		return d, err
	}
}

// Second review, M4: category no-erase was accepted for any device, and a
// profile matching by resource class (or PCI class) escapes Validate's
// match.kinds check: an NVMe, a GPU or an FPGA cleaned by a no-erase
// pipeline came out clean and returned with the last tenant's data. The
// engine refuses such a run the clean verdict, by the kind discovered:
// quarantine, permanent, saying why. A NIC's no-erase run is clean.
func TestNoEraseRunOnNVMeIsNotClean(t *testing.T) {
	quiet := func(s *Step) { s.Destructive = new(bool) }
	for _, tc := range []struct {
		kind hardware.DeviceKind
		want Verdict
	}{
		{hardware.KindNVMe, VerdictQuarantine},
		{hardware.KindGPU, VerdictQuarantine},
		{hardware.KindFPGA, VerdictQuarantine},
		{hardware.KindNIC, VerdictClean},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			cfg := testConfig(pluginStep("reset", quiet)) // matched by resource class only
			cfg.Profiles[0].Pipeline.Category = CategoryNoErase
			h := newHarness(t, cfg)
			asKind(h, tc.kind)
			res := h.clean(t, target(1))
			if res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.want)
			}
			if tc.want == VerdictClean {
				return
			}
			if res.Code != plugins.CodePermanent {
				t.Errorf("code %d, want %d (permanent: no later run of this pipeline erases it)", res.Code, plugins.CodePermanent)
			}
			for _, frag := range []string{"0000:01:00.0", "it is " + aKind(tc.kind) + ", a kind of device that holds tenant data", "says category no-erase", "scourctl placement unquarantine"} {
				if !strings.Contains(res.Reason, frag) {
					t.Errorf("reason %q lacks %q", res.Reason, frag)
				}
			}
			if states(res.Steps) != "reset=succeeded" {
				t.Errorf("steps %s: want the reset recorded as run", states(res.Steps))
			}
		})
	}
}
