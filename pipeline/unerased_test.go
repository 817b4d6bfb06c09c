package pipeline

import (
	"context"
	"strings"
	"testing"

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
		verify   func(context.Context, *plugins.Request) (*plugins.Result, error) // CLEAN of step "check"
		want     Verdict
		code     int
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
		{name: "no-erase pipeline", steps: []Step{pluginStep("reset", quiet)}, category: CategoryNoErase, want: VerdictClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.steps...)
			cfg.Profiles[0].Pipeline.Category = tc.category
			h := newHarness(t, cfg)
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
