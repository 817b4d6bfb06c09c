package claims

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A retired device holds an open quarantine with who and why, until it is
// released; a second retire keeps the first reason.
func TestRetire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{StatePath: t.TempDir()}, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outcome, _, err := s.Retire(ctx, "cmp1", "rp-1", "0000:81:00.0", "alice", "RMA: firmware bug", "", "")
	if err != nil || outcome != RetireCreated {
		t.Fatalf("Retire: %v, %v", outcome, err)
	}
	q, ok, err := s.ActiveQuarantine(ctx, "cmp1", "rp-1")
	if err != nil || !ok || q.Reason != "retired by alice: RMA: firmware bug" || q.RunID != "" || !q.Retired() || q.Address != "0000:81:00.0" {
		t.Fatalf("ActiveQuarantine = %+v, %v, %v", q, ok, err)
	}
	if open, err := s.OpenQuarantines(ctx, "cmp1"); err != nil || len(open) != 1 || open[0].DeviceRP != "rp-1" || open[0].Reason != q.Reason {
		t.Fatalf("OpenQuarantines = %+v, %v; want the retirement", open, err)
	}
	if open, err := s.OpenQuarantines(ctx, "cmp2"); err != nil || len(open) != 0 {
		t.Fatalf("OpenQuarantines of another host = %+v, %v; want none", open, err)
	}
	if outcome, q, err := s.Retire(ctx, "cmp1", "rp-1", "0000:81:00.0", "bob", "other", WipePending, "wipe pending"); err != nil || outcome != RetireStands ||
		q.Reason != "retired by alice: RMA: firmware bug" || q.Wipe != "" {
		t.Fatalf("second Retire: %v, %+v, %v; want the first to stand", outcome, q, err)
	}
	if released, err := s.ReleaseQuarantine(ctx, "cmp1", "rp-1", "carol", "back from RMA"); err != nil || !released {
		t.Fatalf("ReleaseQuarantine: %v, %v", released, err)
	}
	if _, ok, _ := s.ActiveQuarantine(ctx, "cmp1", "rp-1"); ok {
		t.Error("still quarantined after the release")
	}
	if open, err := s.OpenQuarantines(ctx, "cmp1"); err != nil || len(open) != 0 {
		t.Errorf("OpenQuarantines after the release = %+v, %v; want none", open, err)
	}
	if _, _, err := s.Retire(ctx, "cmp1", "rp-1", "", "alice", strings.Repeat("x", 10), "", ""); err != nil {
		t.Errorf("retire after a release: %v", err)
	}
}

// A device retired while its cleaned run waits for the un-reserve: the
// run is closed (cleaned, not returned), so the release cleans the device
// again with a new run instead of resuming the old one into an un-reserve.
func TestRetireClosesARunWaitingForItsReturn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		waiting := cleanedRun(t, s, "rp-nvme-0")
		if _, _, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetRun(ctx, waiting.ID)
		if !got.Closed() || got.State != RunCleaned || !strings.Contains(got.Summary, "retired by alice: RMA") {
			t.Fatalf("waiting run after Retire = %s closed=%t %q; want closed as cleaned, saying who retired it", got.State, got.Closed(), got.Summary)
		}
		if _, err := s.ReleaseQuarantine(ctx, "compute-1", "rp-nvme-0", "bob", "back"); err != nil {
			t.Fatal(err)
		}
		rs := nvmeRun()
		run, resumed, err := s.OpenRun(ctx, rs)
		if err != nil || resumed || run.ID == waiting.ID {
			t.Fatalf("OpenRun after the release = %s resumed=%t, %v; want a new run", run.ID, resumed, err)
		}
	})
}

// Review rev5 F2: a device retired while its run still cleans it (not
// yet waiting for its return, so Retire leaves the run open), and the
// retirement's Placement write failed: nothing moved the generation the
// run's un-reserve PUT is sent at. The store, the authority, refuses to
// journal that PUT while the device has an open quarantine, so it is
// never sent; the refusal names the retirement and leaves the run open
// for its caller to close. Another device's retirement, and a released
// one, refuse nothing.
func TestNoUnreservePutWhileTheDeviceIsRetired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		if _, _, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "alice", "RMA 42", "", ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Retire(ctx, "compute-1", "rp-nvme-1", "0000:82:00.0", "alice", "other device", "", ""); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
			t.Fatal(err)
		}
		j := s.PutJournal(run.ID)
		err = j.NotePut(ctx, 7)
		var qe *QuarantineOpenError
		if !errors.Is(err, ErrQuarantineOpen) || !errors.As(err, &qe) || errors.Is(err, ErrNotCleaned) ||
			!strings.Contains(err.Error(), "retired by alice: RMA 42") {
			t.Fatalf("NotePut on a retired device = %v; want ErrQuarantineOpen naming the retirement", err)
		}
		if g, pending, err := j.LastPut(ctx); err != nil || pending {
			t.Fatalf("LastPut after the refusal = %d, %t, %v; want no PUT journaled", g, pending, err)
		}
		if got, _ := s.GetRun(ctx, run.ID); got.Closed() || !got.AwaitingReturn() {
			t.Fatalf("run after the refusal = %s closed=%t; want open, cleaned, for its caller to close", got.State, got.Closed())
		}
		if _, err := s.ReleaseQuarantine(ctx, "compute-1", "rp-nvme-0", "bob", "back from RMA"); err != nil {
			t.Fatal(err)
		}
		if err := j.NotePut(ctx, 8); err != nil {
			t.Fatalf("NotePut once the retirement was released: %v", err)
		}
	})
}

// A retirement waiting for its wipe says so (Wipe) until a run of the
// device ends quarantined: then the retirement stands, with what that
// run said, and waits for nothing more.
func TestRetireWaitsForItsWipeRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, _, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "alice", "RMA", "bogus", ""); err == nil {
			t.Fatal("Retire with an unknown wipe accepted")
		}
		if _, _, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "alice", "RMA", WipePending, "wipe pending"); err != nil {
			t.Fatal(err)
		}
		open, err := s.OpenQuarantines(ctx, "compute-1")
		if err != nil || len(open) != 1 || open[0].Wipe != WipePending || open[0].Reason != "retired by alice: RMA; wipe pending" {
			t.Fatalf("OpenQuarantines = %+v, %v; want the retirement waiting for its wipe", open, err)
		}
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, run.ID, "retire-wipe", false, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunQuarantined, "wiped before retirement"); err != nil {
			t.Fatal(err)
		}
		q, ok, err := s.ActiveQuarantine(ctx, "compute-1", "rp-nvme-0")
		if err != nil || !ok || q.Wipe != "" || !q.Retired() ||
			q.Reason != "retired by alice: RMA; wipe pending; retirement run "+run.ID+": wiped before retirement" {
			t.Fatalf("ActiveQuarantine after the retirement run = %+v, %v, %v; want the retirement, wipe done, naming the run", q, ok, err)
		}
	})
}

// A device that failed cleaning (a quarantine verdict: most likely still
// holding its last tenant's data) and is then retired: the verdict takes
// the retirement, which waits for its wipe like any other, and its
// retirement run's verdict ends the wait. A second retire changes nothing.
func TestRetireOfAQuarantinedDeviceWaitsForItsWipe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		failed, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, failed.ID, "sanitize", false, StepFailed, "sanitize failed")
		if err := s.FinishRun(ctx, failed.ID, RunQuarantined, "sanitize failed"); err != nil {
			t.Fatal(err)
		}
		outcome, q, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "alice", "RMA", WipePending, "wipe pending")
		if err != nil || outcome != RetireRecordedOnQuarantine || q.Wipe != WipePending || q.RunID != failed.ID ||
			q.Reason != "sanitize failed; retired by alice: RMA; wipe pending" {
			t.Fatalf("Retire of a quarantined device = %v, %+v, %v; want the verdict waiting for the retirement wipe", outcome, q, err)
		}
		if open, err := s.OpenQuarantines(ctx, "compute-1"); err != nil || len(open) != 1 || open[0].Wipe != WipePending {
			t.Fatalf("OpenQuarantines = %+v, %v; want the one quarantine waiting for its wipe", open, err)
		}
		if outcome, q, err := s.Retire(ctx, "compute-1", "rp-nvme-0", "0000:81:00.0", "bob", "other", WipeDeclined, "no wipe"); err != nil ||
			outcome != RetireStands || q.Wipe != WipePending || strings.Contains(q.Reason, "bob") {
			t.Fatalf("second Retire = %v, %+v, %v; want the first retirement to stand", outcome, q, err)
		}
		run, _, err := s.OpenRun(ctx, nvmeRun())
		if err != nil || run.ID == failed.ID {
			t.Fatalf("retirement run = %s, %v; want a new run", run.ID, err)
		}
		runStep(t, s, run.ID, "retire-wipe", false, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunQuarantined, "wiped before retirement"); err != nil {
			t.Fatal(err)
		}
		q, ok, err := s.ActiveQuarantine(ctx, "compute-1", "rp-nvme-0")
		if err != nil || !ok || q.Wipe != "" || q.RunID != failed.ID ||
			q.Reason != "sanitize failed; retired by alice: RMA; wipe pending; retirement run "+run.ID+": wiped before retirement" {
			t.Fatalf("ActiveQuarantine after the retirement run = %+v, %v, %v; want the wipe done, naming the run", q, ok, err)
		}
	})
}

// Review rev5 F4: a retirement decided "no wipe" (the device free, held
// by nobody since its last clean) waits for its retirement wipe once a
// tenant is known to have held the device after that decision: one the
// store learned of before the retirement's transaction (Retire itself),
// a holder a scan saw or a claim recorded after it (WipeRetirementIfUsed).
// A tenant before the device's last clean, or before its last retirement
// run, changes nothing, and neither does a retirement that already waits
// for its wipe or a cleaning verdict's quarantine.
func TestRetirementUsedAfterItsWipeWasDecidedWaitsForItsWipe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		wipeOf := func(rp string) Quarantine {
			t.Helper()
			q, ok, err := s.ActiveQuarantine(ctx, "compute-1", rp)
			if err != nil || !ok {
				t.Fatalf("%s: ActiveQuarantine = %+v, %v, %v", rp, q, ok, err)
			}
			return q
		}
		retire := func(rp string) {
			t.Helper()
			if _, _, err := s.Retire(ctx, "compute-1", rp, "", "alice", "RMA", "", "not wiped: none needed"); err != nil {
				t.Fatal(err)
			}
		}
		ifUsed := func(rp string) (Tenant, bool) {
			t.Helper()
			tn, changed, err := s.WipeRetirementIfUsed(ctx, "compute-1", rp)
			if err != nil {
				t.Fatal(err)
			}
			return tn, changed
		}
		// rp-old: its tenant was cleaned away before the retirement.
		if err := s.SawHolder(ctx, "compute-1", "rp-old", "inst-old"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.MarkReturned(ctx, cleanedRun(t, s, "rp-old").ID, "un-reserved"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		for _, rp := range []string{"rp-old", "rp-scan", "rp-claim"} {
			retire(rp)
		}
		clock.Advance(time.Minute)
		if _, changed := ifUsed("rp-old"); changed || wipeOf("rp-old").Wipe != "" {
			t.Errorf("rp-old: a tenant cleaned away before the retirement made it wait for a wipe: %+v", wipeOf("rp-old"))
		}
		// After the retirement: a scan sees a holder, a claim is recorded.
		if err := s.SawHolder(ctx, "compute-1", "rp-scan", "inst-t"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordClaim(ctx, gpuClaim("inst-c", "rp-claim")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		for rp, want := range map[string]string{"rp-scan": "inst-t", "rp-claim": "inst-c"} {
			tn, changed := ifUsed(rp)
			q := wipeOf(rp)
			if !changed || tn.Instance != want || q.Wipe != WipePending || !strings.Contains(q.Reason, "consumer "+want+" held the device after this retirement's wipe was decided") {
				t.Errorf("%s: WipeRetirementIfUsed = %+v, %v; quarantine %+v; want its wipe pending, naming %s", rp, tn, changed, q, want)
			}
			if _, again := ifUsed(rp); again {
				t.Errorf("%s: changed twice", rp)
			}
		}
		// Its retirement run wipes it; a tenant from before that run
		// changes nothing after it, one after it does again.
		run, _, err := s.OpenRun(ctx, RunStart{Host: "compute-1", DeviceRP: "rp-scan", Address: "0000:82:00.0", Pipeline: "retire"})
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		runStep(t, s, run.ID, "retire-wipe", false, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunQuarantined, "wiped before retirement"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if _, changed := ifUsed("rp-scan"); changed || wipeOf("rp-scan").Wipe != "" {
			t.Errorf("rp-scan after its retirement run: waits for a wipe again on a tenant it wiped: %+v", wipeOf("rp-scan"))
		}
		if err := s.SawHolder(ctx, "compute-1", "rp-scan", "inst-u"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if tn, changed := ifUsed("rp-scan"); !changed || tn.Instance != "inst-u" || wipeOf("rp-scan").Wipe != WipePending {
			t.Errorf("rp-scan: a tenant after its retirement run = %+v, %v; want its wipe pending again", tn, changed)
		}
		// A tenant the store learned of after the caller decided "no
		// wipe", before the retirement's transaction: Retire decides
		// again and the retirement it returns waits for its wipe.
		if err := s.SawHolder(ctx, "compute-1", "rp-race", "inst-r"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		outcome, q, err := s.Retire(ctx, "compute-1", "rp-race", "", "alice", "RMA", "", "not wiped: none needed")
		if err != nil || outcome != RetireCreated || q.Wipe != WipePending || !strings.Contains(q.Reason, "consumer inst-r held the device") {
			t.Errorf("Retire with a tenant since the last clean = %v, %+v, %v; want its wipe pending, naming inst-r", outcome, q, err)
		}
	})
}
