package pipelinestore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// Regression (issue 16, repro 1): scourd stored a "returned" record at the
// clean verdict, before the un-reserve. Killed between the two (Placement
// frozen at the end of the run), it restarted, found the device still
// dirty, cleaned it again and stored a second "returned" record for one
// release. Now the verdict stores "cleaned"; the restarted engine resumes
// that same run without re-running a step, and only the un-reserve's
// MarkReturned says returned: one release, one record.
func TestCrashBetweenVerdictAndUnreserveKeepsOneRecord(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(step("sanitize", true), step("verify", true))
	s := openStore(t, dir)
	pr := &fakePlugins{}
	first, err := engine(t, cfg, s, pr).Clean(ctx, target)
	if err != nil || first.Verdict != pipeline.VerdictClean {
		t.Fatalf("Clean = %+v, %v", first, err)
	}
	if run, _ := s.GetRun(ctx, first.RunID); run.State != claims.RunCleaned || run.Closed() {
		t.Fatalf("after the verdict, before any un-reserve: run %+v; want cleaned and open (nothing was returned yet)", run)
	}
	s.Close() // kill -9 here: the un-reserve never happened

	s = openStore(t, dir)
	pr2 := &fakePlugins{}
	again, err := engine(t, cfg, s, pr2).Clean(ctx, target)
	if err != nil || again.Verdict != pipeline.VerdictClean || again.RunID != first.RunID {
		t.Fatalf("Clean after the restart = %+v, %v; want the same run %s, clean", again, err, first.RunID)
	}
	if calls := pr2.Calls(); len(calls) != 0 {
		t.Fatalf("resumed un-reserve re-ran steps %v; every step was done in that run", calls)
	}
	if err := s.MarkReturned(ctx, again.RunID, "un-reserved"); err != nil {
		t.Fatal(err)
	}
	runs, err := s.ListRuns(ctx, claims.RunFilter{Device: target.RPUUID})
	if err != nil || len(runs) != 1 || runs[0].State != claims.RunReturned || !runs[0].Closed() {
		t.Fatalf("records of the release = %+v, %v; want exactly one, returned", runs, err)
	}
	steps, _ := s.Steps(ctx, first.RunID)
	if got, want := summary(steps), "0:sanitize#1=ok 1:verify#1=ok"; got != want {
		t.Fatalf("steps = %s, want %s", got, want)
	}
}

// A cleaned run whose device Placement showed held by a consumer after the
// clean is not resumed into an un-reserve: that consumer's data may be on
// it. The run is closed as cleaned, not returned, naming the consumer, and
// a new run cleans the device again.
func TestCleanedRunNotResumedAfterAnotherTenant(t *testing.T) {
	ctx := context.Background()
	cfg := config(step("sanitize", true))
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	first, err := engine(t, cfg, s, &fakePlugins{}).Clean(ctx, target)
	if err != nil || first.Verdict != pipeline.VerdictClean {
		t.Fatalf("Clean = %+v, %v", first, err)
	}
	if err := s.SawHolder(ctx, "compute-1", target.RPUUID, "inst-meanwhile"); err != nil {
		t.Fatal(err)
	}
	pr := &fakePlugins{}
	second, err := engine(t, cfg, s, pr).Clean(ctx, target)
	if err != nil || second.Verdict != pipeline.VerdictClean || second.RunID == first.RunID || len(pr.Calls()) != 1 {
		t.Fatalf("Clean after another tenant = %+v, %v, calls %v; want a new run that cleans again", second, err, pr.Calls())
	}
	old, _ := s.GetRun(ctx, first.RunID)
	if old.State != claims.RunCleaned || !old.Closed() || !strings.Contains(old.Summary, "inst-meanwhile") {
		t.Fatalf("superseded cleaned run = %+v; want closed as cleaned, naming inst-meanwhile", old)
	}
	rec, _ := s.Record(ctx, second.RunID)
	if rec.PreviousTenant.InstanceUUID != "inst-meanwhile" || rec.PreviousTenant.ProjectID != claims.UnknownTenant {
		t.Fatalf("new record's previous tenant = %+v; want inst-meanwhile, project unknown", rec.PreviousTenant)
	}
}

// A purge pipeline whose verifying step ran but could not verify (not
// applicable) gets no clean record: the store refuses it, and the run is
// quarantined instead of being resumed and refused forever.
func TestPurgeWithoutPassedVerificationIsQuarantined(t *testing.T) {
	ctx := context.Background()
	check := step("check", true)
	check.Verifies = true
	cfg := config(step("sanitize", true), check)
	cfg.Profiles[0].Pipeline.Category = pipeline.CategoryPurge
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"check": func(context.Context) (*plugins.Result, error) {
			v := plugins.Verification{Method: "none", Expected: "nothing", Result: plugins.VerifyNotApplicable, Reason: "noise"}
			return plugins.OK(map[string]any{plugins.VerificationKey: v.Map()}), nil
		},
	}}
	res, err := engine(t, cfg, s, pr).Clean(ctx, target)
	if err == nil || !strings.Contains(err.Error(), "claims purge, but no verification step passed") {
		t.Fatalf("Clean = %+v, %v; want the clean verdict refused", res, err)
	}
	runs, _ := s.ListRuns(ctx, claims.RunFilter{Device: target.RPUUID})
	if len(runs) != 1 || runs[0].State != claims.RunQuarantined {
		t.Fatalf("runs = %+v; want one, quarantined", runs)
	}
	if _, open, _ := s.ActiveQuarantine(ctx, "compute-1", target.RPUUID); !open {
		t.Fatal("no open quarantine: the device would be cleaned and refused forever")
	}
}

// A purge pipeline whose erasing step was skipped (on_unsupported: skip)
// and whose verification then passed (a read-back of untouched media that
// happened to match) gets no clean record: nothing was erased. The run is
// quarantined, saying why; a run in which the erase ran and reported its
// technique is cleaned. The engine refuses it now, before the store does
// (claims TestPurgeNeedsAnEraseAndThenAPassedVerification): the verifying
// plugin, destructive by default, counted as an erase that succeeded
// (second review, M2).
func TestPurgeWithEveryEraseSkippedIsQuarantined(t *testing.T) {
	ctx := context.Background()
	sanitize := step("sanitize", true)
	sanitize.Requires, sanitize.OnUnsupported = pipeline.Requires{"nvme.sanitize": ">=block"}, pipeline.OnUnsupportedSkip
	check := step("check", true)
	check.Verifies = true
	cfg := config(sanitize, check)
	cfg.Profiles[0].Pipeline.Category = pipeline.CategoryPurge
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"check": func(context.Context) (*plugins.Result, error) {
			v := plugins.Verification{Method: "read-back of 64 sampled blocks", Expected: "every byte 0x00", Result: plugins.VerifyPassed}
			return plugins.OK(map[string]any{plugins.VerificationKey: v.Map()}), nil
		},
	}}
	res, err := engine(t, cfg, s, pr).Clean(ctx, target)
	if err != nil || res.Verdict != pipeline.VerdictQuarantine || !strings.Contains(res.Reason, "no erasing step succeeded in this run (sanitize (skipped))") {
		t.Fatalf("Clean = %+v, %v; want quarantine for want of an erase, the verifying plugin no erase", res, err)
	}
	runs, _ := s.ListRuns(ctx, claims.RunFilter{Device: target.RPUUID})
	if len(runs) != 1 || runs[0].State != claims.RunQuarantined || !strings.Contains(runs[0].Summary, "no erasing step") {
		t.Fatalf("runs = %+v; want one, quarantined, saying no erase ran", runs)
	}
	if _, open, _ := s.ActiveQuarantine(ctx, "compute-1", target.RPUUID); !open {
		t.Fatal("no open quarantine: the device is not visibly held")
	}

	erased := config(step("sanitize", true), check)
	erased.Profiles[0].Pipeline.Category = pipeline.CategoryPurge
	pr.clean["sanitize"] = func(context.Context) (*plugins.Result, error) {
		return plugins.OK(map[string]any{plugins.TechniqueKey: "NVMe Sanitize, Block Erase"}), nil
	}
	other := target
	other.Address, other.RPUUID = "0000:82:00.0", "rp-nvme-1"
	if res, err := engine(t, erased, s, pr).Clean(ctx, other); err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("with the erase run: Clean = %+v, %v; want clean", res, err)
	}
}

// Review finding (rev2, HIGH 2), through the real engine and store: a run
// interrupted after its erase is not resumed when, while scourd was down,
// the store saw another consumer hold the device (the fence was lifted,
// tenant B used it, Nova burned it again). The old run is closed as
// superseded, naming B, and a new run erases again from the first step;
// its record names B as the previous tenant.
func TestInterruptedRunNotResumedAfterAnotherTenant(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(step("sanitize", true), step("verify", true))
	interruptAtVerify(t, cfg, openStore(t, dir), nvmeWithSerial(""), nil)

	s := openStore(t, dir) // scourd back: its scan sees B holding the device
	if err := s.SawHolder(context.Background(), "compute-1", target.RPUUID, "inst-b"); err != nil {
		t.Fatal(err)
	}
	pr := &fakePlugins{} // B gone, the device burned: dirty again
	res, err := engine(t, cfg, s, pr).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("Clean after B = %+v, %v", res, err)
	}
	if got := pr.Calls(); !slices.Equal(got, []string{"sanitize", "verify"}) {
		t.Fatalf("calls %v: want the erase again (B's data), then verify", got)
	}
	if r := supersededBy(t, s, res.RunID); r.State != claims.RunFailed || !strings.Contains(r.Summary, "superseded") || !strings.Contains(r.Summary, "inst-b") {
		t.Fatalf("interrupted run = %+v; want failed, superseded, naming inst-b", r)
	}
	rec, _ := s.Record(context.Background(), res.RunID)
	if rec.PreviousTenant.InstanceUUID != "inst-b" {
		t.Fatalf("new record's previous tenant = %+v; want inst-b", rec.PreviousTenant)
	}
}

// Review finding (M2): a clear run in which nothing was erased was
// cleaned and returned, its record claiming "clear" with no technique:
// every erase skipped (on_unsupported: skip) or failed (an optional
// step). The store refuses the clean verdict as it does for purge, and the
// run is quarantined saying why; a run whose erase succeeded is cleaned,
// and a no-erase pipeline (a device that holds no tenant data) needs none.
func TestClearWithoutASuccessfulEraseIsQuarantined(t *testing.T) {
	ctx := context.Background()
	skipped := step("sanitize", true)
	skipped.Requires, skipped.OnUnsupported = pipeline.Requires{"nvme.sanitize": ">=block"}, pipeline.OnUnsupportedSkip
	failing := step("sanitize", false)
	erasing := func(context.Context) (*plugins.Result, error) {
		return plugins.OK(map[string]any{plugins.TechniqueKey: "NVMe Sanitize, Block Erase"}), nil
	}
	for i, tc := range []struct {
		name     string
		category string
		erase    pipeline.Step
		sanitize func(context.Context) (*plugins.Result, error)
		refused  bool
	}{
		{"clear, erase skipped", pipeline.CategoryClear, skipped, erasing, true},
		{"clear, optional erase failed", pipeline.CategoryClear, failing, func(context.Context) (*plugins.Result, error) {
			return nil, plugins.Errorf(plugins.CodePermanent, "sanitize failed")
		}, true},
		{"clear, erase reported no technique", pipeline.CategoryClear, step("sanitize", true), nil, true},
		{"clear, erase succeeded", pipeline.CategoryClear, step("sanitize", true), erasing, false},
		{"no-erase on a NIC, nothing erased", pipeline.CategoryNoErase, step("reset", true), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(tc.erase, step("reset2", true))
			cfg.Profiles[0].Pipeline.Category = tc.category
			s := openStore(t, filepath.Join(t.TempDir(), "state"))
			pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){"sanitize": tc.sanitize}}
			dev := target
			dev.RPUUID = fmt.Sprintf("rp-nvme-%d", i)
			be := nvmeWithSerial("")
			if tc.category == pipeline.CategoryNoErase { // for a device that holds no tenant data
				nvme := be.DiscoverF
				be.DiscoverF = func(ctx context.Context, a hardware.Address) (*hardware.Device, error) {
					d, err := nvme(ctx, a)
					d.Kind, d.Class = hardware.KindNIC, "0x020000"
					return d, err
				}
			}
			res, err := engineOn(t, cfg, s, pr, be).Clean(ctx, dev)
			runs, _ := s.ListRuns(ctx, claims.RunFilter{Device: dev.RPUUID})
			if !tc.refused {
				if err != nil || res.Verdict != pipeline.VerdictClean || len(runs) != 1 || runs[0].State != claims.RunCleaned {
					t.Fatalf("Clean = %+v, %v, runs %+v; want cleaned", res, err, runs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "claims clear, but no erasing step") {
				t.Fatalf("Clean = %+v, %v; want the clean verdict refused for want of an erase", res, err)
			}
			if len(runs) != 1 || runs[0].State != claims.RunQuarantined || !strings.Contains(runs[0].Summary, "no erasing step") {
				t.Fatalf("runs = %+v; want one, quarantined, saying no erase succeeded", runs)
			}
			if tc.sanitize == nil && (!strings.Contains(runs[0].Summary, "steps that succeeded without reporting a technique: sanitize, reset2") ||
				!strings.Contains(runs[0].Summary, "must report details.technique")) {
				t.Fatalf("summary %q; want it to name the steps that reported no technique and what the plugin must report", runs[0].Summary)
			}
			if _, open, _ := s.ActiveQuarantine(ctx, "compute-1", dev.RPUUID); !open {
				t.Fatal("no open quarantine: the device is not visibly held")
			}
		})
	}
}
