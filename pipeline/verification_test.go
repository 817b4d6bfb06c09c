package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/gpu"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// answer is a plugin CLEAN that answers status ok with these details.
func answer(details map[string]any) func(context.Context, *plugins.Request) (*plugins.Result, error) {
	return func(context.Context, *plugins.Request) (*plugins.Result, error) { return plugins.OK(details), nil }
}

func verificationDetails(result string) map[string]any {
	v := plugins.Verification{Method: "read-back", BytesRead: 4096, Expected: "every byte 0x00", Result: result}
	if result == plugins.VerifyFailed {
		v.Mismatch = "byte at offset 0 is 0xab"
	}
	if result == plugins.VerifyNotApplicable {
		v.Reason = "crypto erase leaves noise"
	}
	return map[string]any{plugins.VerificationKey: v.Map()}
}

// A verification is part of a step's outcome: a step that answers
// {"status":"ok"} but reports a verification that did not pass (or, when
// it verifies, none at all) fails permanently, so the run is quarantined
// and the device stays reserved, whatever the step's status, and even
// when the step is optional. Issue 31 item 2: such a plugin's device was
// returned with the tenant's data on it.
func TestVerificationIsPartOfTheStepsOutcome(t *testing.T) {
	no := false
	verifying := func(s *Step) { s.Verifies = true }
	optional := func(s *Step) { s.Required = &no }
	for _, tc := range []struct {
		name     string
		mods     []func(*Step)
		clean    func(context.Context, *plugins.Request) (*plugins.Result, error)
		verdict  Verdict
		state    StepState
		recorded string // the check step's recorded verification result
		reason   string
	}{
		{"failed verification, status ok", []func(*Step){verifying}, answer(verificationDetails(plugins.VerifyFailed)),
			VerdictQuarantine, StepFailed, plugins.VerifyFailed, "its verification failed: byte at offset 0 is 0xab"},
		{"failed verification, status ok, optional step", []func(*Step){verifying, optional}, answer(verificationDetails(plugins.VerifyFailed)),
			VerdictQuarantine, StepFailed, plugins.VerifyFailed, "its verification failed"},
		{"failed verification reported by a step not marked verifies", nil, answer(verificationDetails(plugins.VerifyFailed)),
			VerdictQuarantine, StepFailed, plugins.VerifyFailed, "its verification failed"},
		{"no verification from a verifying step", []func(*Step){verifying}, answer(map[string]any{"bytes": 4096}),
			VerdictQuarantine, StepFailed, plugins.VerifyNotReported, "reported no details.verification"},
		{"unknown verification result", []func(*Step){verifying}, answer(map[string]any{plugins.VerificationKey: map[string]any{"result": "ok"}}),
			VerdictQuarantine, StepFailed, "ok", `verification result "ok" is none of`},
		{"verification that is not an object", []func(*Step){verifying}, answer(map[string]any{plugins.VerificationKey: "passed"}),
			VerdictQuarantine, StepFailed, plugins.VerifyNotReported, "is not an object"},
		{"failed verification in an optional step's error", []func(*Step){verifying, optional},
			func(context.Context, *plugins.Request) (*plugins.Result, error) {
				return nil, &plugins.Error{Code: plugins.CodePermanent, Msg: "mismatch", Details: verificationDetails(plugins.VerifyFailed)}
			},
			VerdictQuarantine, StepFailed, plugins.VerifyFailed, "mismatch"},
		{"passed verification", []func(*Step){verifying}, answer(verificationDetails(plugins.VerifyPassed)),
			VerdictClean, StepSucceeded, plugins.VerifyPassed, ""},
		{"not applicable: recorded skipped, proves nothing", []func(*Step){verifying}, answer(verificationDetails(plugins.VerifyNotApplicable)),
			VerdictClean, StepSkipped, plugins.VerifyNotApplicable, ""},
		{"no verification from a step that does not verify", nil, answer(map[string]any{"bytes": 4096}),
			VerdictClean, StepSucceeded, "", ""},
		{"a step that does not verify describing its check in words (GPU scrub)", nil,
			answer(map[string]any{plugins.VerificationKey: "every covered byte read back and compared with zero", "verified": true}),
			VerdictClean, StepSucceeded, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(pluginStep("wipe"), pluginStep("check", tc.mods...))
			h := newHarness(t, cfg)
			h.pr.clean["check"] = tc.clean
			res := h.clean(t, target(1))
			if res.Verdict != tc.verdict {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.verdict)
			}
			if len(res.Steps) != 2 || res.Steps[1].Name != "check" {
				t.Fatalf("steps %s, want wipe and check", states(res.Steps))
			}
			check := res.Steps[1]
			if check.State != tc.state {
				t.Errorf("check %s (%s), want %s", check.State, check.Message, tc.state)
			}
			if got, _ := plugins.VerificationResult(check.Details); got != tc.recorded {
				t.Errorf("check's recorded verification %q, want %q (details %v)", got, tc.recorded, check.Details)
			}
			if tc.verdict == VerdictClean {
				return
			}
			if res.Step != "check" || res.Code != plugins.CodePermanent || !strings.Contains(res.Reason, tc.reason) {
				t.Errorf("decided at %q code %d: %s; want step check, code %d, a reason saying %q", res.Step, res.Code, res.Reason, plugins.CodePermanent, tc.reason)
			}
			if tc.state == StepFailed && check.Code != plugins.CodePermanent {
				t.Errorf("check failed with code %d, want %d (permanent: quarantine)", check.Code, plugins.CodePermanent)
			}
		})
	}
}

// The built-in verify is held to the same rule: an optional verify that
// finds the tenant's bytes ends the run quarantined instead of letting it
// go on to a clean verdict.
func TestOptionalBuiltinVerifyThatFailsQuarantines(t *testing.T) {
	media := filepath.Join(t.TempDir(), "nvme0n1")
	if err := os.WriteFile(media, bytes.Repeat([]byte{0xab}, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	no := false
	cfg := testConfig(pluginStep("wipe"), Step{Name: "verify", Type: "verify", Required: &no, Args: map[string]any{"mode": "all"}})
	h := newHarness(t, cfg, func(h *harness) {
		h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
			return []hardware.Media{{Path: media, Size: 1 << 16}}, nil
		}
	})
	res := h.clean(t, target(1))
	if res.Verdict != VerdictQuarantine || res.Step != "verify" {
		t.Fatalf("verdict %s at %q (%s), want quarantine at verify; steps %s", res.Verdict, res.Step, res.Reason, states(res.Steps))
	}
	if got, _ := plugins.VerificationResult(res.Steps[1].Details); got != plugins.VerifyFailed {
		t.Errorf("verify's recorded verification %q, want failed", got)
	}
}

// An optional step that verifies and fails without a verification (a
// read error, a timeout) checked nothing: the run ends there, retried
// later, never clean; a failed optional step that does not verify still
// lets the run go on. Found in review (rev1 Medium 4).
func TestOptionalVerifyThatCannotReadEndsTheRun(t *testing.T) {
	no := false
	optional := func(s *Step) { s.Required = &no }
	verifying := func(s *Step) { s.Verifies = true }
	fails := func(code int) func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return func(context.Context, *plugins.Request) (*plugins.Result, error) {
			return nil, plugins.Errorf(code, "reading /dev/nvme0n1 at offset 0: input/output error")
		}
	}
	for _, tc := range []struct {
		name    string
		check   Step
		clean   func(context.Context, *plugins.Request) (*plugins.Result, error)
		verdict Verdict
	}{
		{"verifying plugin, read error", pluginStep("check", verifying, optional), fails(plugins.CodeTryAgainLater), VerdictRetryLater},
		{"verifying plugin, timeout", pluginStep("check", verifying, optional), fails(plugins.CodeTimeout), VerdictRetryLater},
		{"built-in verify, media unreadable", Step{Name: "check", Type: "verify", Required: &no}, nil, VerdictRetryLater},
		{"plugin that does not verify, read error", pluginStep("check", optional), fails(plugins.CodeTryAgainLater), VerdictClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(pluginStep("wipe"), tc.check), func(h *harness) {
				h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
					return []hardware.Media{{Path: filepath.Join(t.TempDir(), "gone"), Size: 1 << 16}}, nil
				}
			})
			if tc.clean != nil {
				h.pr.clean["check"] = tc.clean
			}
			res := h.clean(t, target(1))
			if res.Verdict != tc.verdict {
				t.Fatalf("verdict %s at %q (%s), want %s; steps %s", res.Verdict, res.Step, res.Reason, tc.verdict, states(res.Steps))
			}
			if tc.verdict != VerdictClean && (res.Step != "check" || !strings.Contains(res.Reason, "step check failed")) {
				t.Fatalf("decided at %q: %s; want the check step named", res.Step, res.Reason)
			}
		})
	}
}

// The last check before a clean verdict holds whatever path led there:
// a run resumed from a record an older scour stored (a verifying step
// recorded succeeded with a failed verification) is not clean.
func TestResumedStepWithFailedVerificationIsNotClean(t *testing.T) {
	cfg := testConfig(pluginStep("check", func(s *Step) { s.Verifies = true }), pluginStep("reset"))
	h := newHarness(t, cfg)
	tg := target(1)
	c := cfg
	c.setDefaults()
	r := &run{t: tg, prof: &c.Profiles[0]}
	open, _, err := h.cp.OpenRun(context.Background(), r.start())
	if err != nil {
		t.Fatal(err)
	}
	details := verificationDetails(plugins.VerifyFailed)
	details[DefinitionKey] = definition(&c.Profiles[0].Pipeline)
	h.cp.StepStarted(context.Background(), open.ID, StepRecord{RunID: open.ID, Index: 0, Name: "check", State: StepSucceeded, Details: details})

	res := h.clean(t, tg)
	if res.RunID != open.ID {
		t.Fatalf("run %s, want the resumed run %s", res.RunID, open.ID)
	}
	if res.Verdict != VerdictQuarantine || res.Step != "check" || !strings.Contains(res.Reason, `recorded verification "failed"`) {
		t.Fatalf("verdict %s at %q: %s; want quarantine at check naming its failed verification", res.Verdict, res.Step, res.Reason)
	}
	if got := h.pr.Calls(); len(got) != 1 || got[0] != "CLEAN reset" {
		t.Fatalf("calls %v, want only reset run (check resumed as recorded)", got)
	}
}

// detailsScrubber is a backend whose GPU scrub reports the scour GPU
// scrub tool's details (hardware/gpu), as the real backend does.
type detailsScrubber struct {
	*fakehw.Backend
	details map[string]any
}

func (d detailsScrubber) ScrubGPUDetails(context.Context, hardware.Address, hardware.Progress) (map[string]any, error) {
	return d.details, nil
}

// The GPU scrub's details describe its read-back in words under
// "verification" (a sentence, not a verification object): a scrub that
// succeeded is not failed for it, and the record lists no verification
// it did not make.
func TestGPUScrubDetailsAreNotAFailedVerification(t *testing.T) {
	details := (&gpu.Report{TotalBytes: 1 << 20, FreeBytes: 1 << 20, CoveredBytes: 1 << 20, MinCoverage: 0.9, Verified: true}).Details()
	if _, ok := details[plugins.VerificationKey].(string); !ok {
		t.Fatalf("the GPU scrub's details no longer describe the verification in words (%v): adapt this test", details[plugins.VerificationKey])
	}
	h := newHarness(t, testConfig(Step{Name: "scrub", Type: "gpu-scrub"}))
	e, err := New(testConfig(Step{Name: "scrub", Type: "gpu-scrub"}), Options{Logger: h.e.log, Checkpoints: NewMemCheckpoints(),
		Backend: detailsScrubber{h.be, details}, Plugins: h.pr,
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Clean(context.Background(), target(1))
	if err != nil || res.Verdict != VerdictClean {
		t.Fatalf("Clean = %v, %v; want clean", res, err)
	}
}

// A verification that found the previous tenant's data is never retried,
// within the step or by a later run, whatever retry.attempts and
// retryable_codes say: a later attempt that passes (fresh random samples,
// a plugin that answers otherwise the second time) must not outweigh the
// finding. The run ends quarantined, the step's CLEAN having run once.
// Found in review (H2): a verifying plugin answering code 11 with a
// failed verification, then ok, came out clean, the mismatch kept only in
// the earlier tries' errors that the claims store drops first.
func TestFailedVerificationIsNeverRetried(t *testing.T) {
	verifying := func(s *Step) { s.Verifies = true }
	retry := func(attempts int, codes ...int) func(*Step) {
		return func(s *Step) { s.Retry.Attempts, s.Retry.RetryableCodes = attempts, codes }
	}
	// firstFails answers code with a failed verification (a mismatch),
	// then ok with a passed one.
	firstFails := func(code int) func(context.Context, *plugins.Request) (*plugins.Result, error) {
		n := 0
		return func(context.Context, *plugins.Request) (*plugins.Result, error) {
			if n++; n == 1 {
				return nil, &plugins.Error{Code: code, Msg: "tenant data at offset 0", Details: verificationDetails(plugins.VerifyFailed)}
			}
			return plugins.OK(verificationDetails(plugins.VerifyPassed)), nil
		}
	}
	for _, tc := range []struct {
		name  string
		mods  []func(*Step)
		clean func(context.Context, *plugins.Request) (*plugins.Result, error)
	}{
		{"code 11 with a mismatch, attempts 2", []func(*Step){verifying, retry(2)}, firstFails(plugins.CodeTryAgainLater)},
		{"code 11 with a mismatch, attempts 1: no retry-later run either", []func(*Step){verifying, retry(1)}, firstFails(plugins.CodeTryAgainLater)},
		{"code 15 with a mismatch, attempts 3", []func(*Step){verifying, retry(3)}, firstFails(plugins.CodeTimeout)},
		{"plugin code listed retryable, attempts 2", []func(*Step){verifying, retry(2, 11, 15, 101)}, firstFails(101)},
		{"code 12 listed retryable, attempts 2", []func(*Step){verifying, retry(2, 11, 12, 15)}, firstFails(plugins.CodePermanent)},
		{"code 12 listed retryable, attempts 1", []func(*Step){verifying, retry(1, 11, 12, 15)}, firstFails(plugins.CodePermanent)},
		{"ok with a failed verification, code 12 listed retryable", []func(*Step){verifying, retry(1, 11, 12, 15)},
			answer(verificationDetails(plugins.VerifyFailed))},
		{"a step not marked verifies reporting a mismatch", []func(*Step){retry(2)}, firstFails(plugins.CodeTryAgainLater)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(pluginStep("wipe"), pluginStep("check", tc.mods...)))
			h.pr.clean["check"] = tc.clean
			res := h.clean(t, target(1))
			if res.Verdict != VerdictQuarantine || res.Step != "check" || res.Code != plugins.CodePermanent {
				t.Fatalf("verdict %s at %q code %d (%s), want quarantine at check with code %d; steps %s",
					res.Verdict, res.Step, res.Code, res.Reason, plugins.CodePermanent, states(res.Steps))
			}
			if !strings.Contains(res.Reason, "byte at offset 0 is 0xab") {
				t.Errorf("reason %q does not name the mismatch", res.Reason)
			}
			n := 0
			for _, c := range h.pr.Calls() {
				if c == "CLEAN check" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("check's CLEAN ran %d times, want once (calls %v)", n, h.pr.Calls())
			}
			check := res.Steps[len(res.Steps)-1]
			if check.State != StepFailed || check.Attempts > 1 {
				t.Errorf("check %s after %d attempt(s), want failed after 1", check.State, check.Attempts)
			}
			if got, _ := plugins.VerificationResult(check.Details); got != plugins.VerifyFailed {
				t.Errorf("check's recorded verification %q, want failed", got)
			}
		})
	}
}

// A verifying step that could not verify (an I/O error, a timeout; a
// failed verification that gives only the reason nothing could be
// compared, as the built-in verify reports samples lost across a
// restart) checked nothing: that may be retried, and a later attempt
// that passes counts.
func TestVerificationThatCouldNotBeMadeIsRetried(t *testing.T) {
	couldNot := plugins.Verification{Method: "none", Result: plugins.VerifyFailed, Reason: "the pre-erase samples are gone"}
	for _, tc := range []struct {
		name string
		err  *plugins.Error
	}{
		{"read error, no verification", plugins.Errorf(plugins.CodeTryAgainLater, "reading /dev/nvme0n1: input/output error")},
		{"failed verification giving only why nothing was compared", &plugins.Error{Code: plugins.CodeTryAgainLater, Msg: "samples lost",
			Details: map[string]any{plugins.VerificationKey: couldNot.Map()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(pluginStep("wipe"), pluginStep("check", func(s *Step) { s.Verifies = true; s.Retry.Attempts = 2 })))
			n := 0
			h.pr.clean["check"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
				if n++; n == 1 {
					return nil, tc.err
				}
				return plugins.OK(verificationDetails(plugins.VerifyPassed)), nil
			}
			if res := h.clean(t, target(1)); res.Verdict != VerdictClean || n != 2 {
				t.Fatalf("verdict %s (%s) after %d CLEANs, want clean after 2", res.Verdict, res.Reason, n)
			}
		})
	}
}

// The built-in verify under retryable_codes [11, 12, 15]: a sampled block
// showing the tenant's data is code 12; retried, the next attempt draws
// new random samples that can miss the one block left. Here the media
// are zeroed during the backoff, standing for such a lucky draw: the run
// must be quarantined after one attempt whatever the next would find.
func TestBuiltinVerifyMismatchIsNeverRetried(t *testing.T) {
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			media := filepath.Join(t.TempDir(), "nvme0n1")
			data := make([]byte, 1<<20)
			data[100] = 0xab // one tenant byte, in the first block (always sampled)
			if err := os.WriteFile(media, data, 0o600); err != nil {
				t.Fatal(err)
			}
			verify := Step{Name: "verify", Type: "verify", Args: map[string]any{"mode": "sample", "samples": 3},
				Retry: Retry{Attempts: attempts, Backoff: time.Millisecond, RetryableCodes: []int{11, 12, 15}}}
			h := newHarness(t, testConfig(pluginStep("wipe"), verify), func(h *harness) {
				h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
					return []hardware.Media{{Path: media, Size: int64(len(data))}}, nil
				}
			})
			h.e.sleep = func(context.Context, time.Duration) bool {
				if err := os.WriteFile(media, make([]byte, len(data)), 0o600); err != nil {
					t.Error(err)
				}
				return true
			}
			res := h.clean(t, target(1))
			if res.Verdict != VerdictQuarantine || res.Step != "verify" || res.Code != plugins.CodePermanent {
				t.Fatalf("verdict %s at %q code %d (%s), want quarantine at verify with code %d; steps %s",
					res.Verdict, res.Step, res.Code, res.Reason, plugins.CodePermanent, states(res.Steps))
			}
			v := res.Steps[len(res.Steps)-1]
			if v.Attempts != 1 {
				t.Errorf("verify ran %d attempts, want 1", v.Attempts)
			}
			if got, _ := plugins.VerificationResult(v.Details); got != plugins.VerifyFailed {
				t.Errorf("verify's recorded verification %q, want failed", got)
			}
		})
	}
}
