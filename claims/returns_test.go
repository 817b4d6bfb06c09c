package claims

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// cleanedRun opens a run on rp, runs one step and stores the clean verdict.
func cleanedRun(t *testing.T, s *Store, rp string) Run {
	t.Helper()
	rs := nvmeRun()
	rs.DeviceRP = rp
	run, _, err := s.OpenRun(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	runStep(t, s, run.ID, "sanitize", false, StepOK, "")
	if err := s.FinishRun(context.Background(), run.ID, RunCleaned, "clean"); err != nil {
		t.Fatal(err)
	}
	run, _ = s.GetRun(context.Background(), run.ID)
	return run
}

func TestCleanedRunWaitsForItsReturn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		run := cleanedRun(t, s, "rp-nvme-0")
		if !run.AwaitingReturn() || run.CleanedAt == nil || run.Closed() {
			t.Fatalf("cleaned run = %+v; want open, awaiting its return", run)
		}
		if _, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "late"}); !errors.Is(err, ErrRunFinished) {
			t.Fatalf("step on a cleaned run: %v, want ErrRunFinished (its steps are sealed)", err)
		}
		if err := s.NoteReturnPending(ctx, run.ID, "Placement answered 503"); err != nil {
			t.Fatal(err)
		}
		again, resumed, err := s.OpenRun(ctx, nvmeRun())
		if err != nil || !resumed || again.ID != run.ID || !strings.Contains(again.Summary, "503") {
			t.Fatalf("OpenRun = %+v, %v, %v; want the cleaned run, resumed, saying why it is still reserved", again, resumed, err)
		}
		if rec, _ := s.Record(ctx, run.ID); rec.Result.State != "cleaned" || rec.EndedAt != nil {
			t.Fatalf("record before the un-reserve = %+v", rec.Result)
		}
		if err := s.MarkReturned(ctx, run.ID, "un-reserved"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetRun(ctx, run.ID); got.State != RunReturned || !got.Closed() || got.Summary != "un-reserved" {
			t.Fatalf("after MarkReturned: %+v", got)
		}
		// A failed run cannot be marked returned.
		failed, _, _ := s.OpenRun(ctx, nvmeRun())
		if err := s.FinishRun(ctx, failed.ID, RunFailed, "sanitize failed"); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReturned(ctx, failed.ID, ""); !errors.Is(err, ErrNotCleaned) {
			t.Fatalf("MarkReturned of a failed run: %v, want ErrNotCleaned", err)
		}
		// A cleaned run superseded (the engine's FinishRun with another
		// verdict) is closed as cleaned, not returned.
		sup := cleanedRun(t, s, "rp-nvme-1")
		if err := s.FinishRun(ctx, sup.ID, RunFailed, "superseded: config now says nvme v4"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetRun(ctx, sup.ID); got.State != RunCleaned || !got.Closed() || !strings.Contains(got.Summary, "not returned") {
			t.Fatalf("superseded cleaned run = %+v", got)
		}
	})
}

func TestSettleReturns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		now := map[string]DeviceNow{
			"rp-unreserved": {},
			"rp-elsewhere":  {},
			"rp-allocated":  {Allocated: true},
			"rp-reserved":   {Reserved: true},
		}
		ids := map[string]string{}
		for _, rp := range []string{"rp-unreserved", "rp-elsewhere", "rp-allocated", "rp-reserved", "rp-unreadable"} {
			ids[rp] = cleanedRun(t, s, rp).ID
		}
		// scour sent its un-reserve PUT for rp-unreserved, and never one for
		// rp-elsewhere: someone else un-reserved that device.
		if err := s.PutJournal(ids["rp-unreserved"]).NotePut(ctx, 12); err != nil {
			t.Fatal(err)
		}
		n, err := s.SettleReturns(ctx, "compute-1", func(_ context.Context, rp string) (DeviceNow, error) {
			d, ok := now[rp]
			if !ok {
				return DeviceNow{}, errors.New("503")
			}
			return d, nil
		})
		if want := (Settled{Returned: 1, Closed: 2, Elsewhere: 1}); err != nil || n != want {
			t.Fatalf("SettleReturns = %+v, %v; want %+v", n, err, want)
		}
		for rp, want := range map[string]struct {
			state  RunState
			closed bool
			says   string
		}{
			"rp-unreserved": {RunReturned, true, "returned"},
			"rp-elsewhere":  {RunCleaned, true, "by someone else before scour sent its un-reserve"},
			"rp-allocated":  {RunCleaned, true, "not returned to the pool by scour: Placement showed the device allocated before scour un-reserved it"},
			"rp-reserved":   {RunCleaned, false, ""},
			"rp-unreadable": {RunCleaned, false, ""},
		} {
			if got, _ := s.GetRun(ctx, ids[rp]); got.State != want.state || got.Closed() != want.closed || !strings.Contains(got.Summary, want.says) {
				t.Errorf("%s: %s closed=%t (%s); want %s closed=%t saying %q", rp, got.State, got.Closed(), got.Summary, want.state, want.closed, want.says)
			}
		}
	})
}

// A consumer known only from before the device's last clean is not its
// previous tenant any more: that clean erased its data, and whoever held
// the device since went unseen (a stale return's re-clean). The record
// says unknown; a consumer seen after the clean is named again.
func TestPreviousTenantNotFromBeforeTheLastClean(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-a"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || !ok || p.Instance != "inst-a" {
			t.Fatalf("before any clean: %+v %v %v; want inst-a", p, ok, err)
		}
		cleanedRun(t, s, "rp-nvme-0")
		clock.Advance(time.Minute)
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || ok {
			t.Fatalf("after a clean, nobody seen since: %+v %v %v; want none (unknown)", p, ok, err)
		}
		// The same consumer holding the device again after the clean (it
		// got the device back) is its previous tenant again, dated anew.
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-a"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || !ok || p.Instance != "inst-a" || !p.Since.Equal(clock.Now().Truncate(time.Microsecond)) {
			t.Fatalf("the first consumer seen again after the clean: %+v %v %v; want inst-a since now", p, ok, err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-b"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || !ok || p.Instance != "inst-b" {
			t.Fatalf("a consumer seen after the clean: %+v %v %v; want inst-b", p, ok, err)
		}
		// A claim of an instance that held the device before the clean and
		// got it back later (unshelve) names it from its reactivation,
		// not from the older holder row.
		c := gpuClaim("inst-b", "rp-nvme-1")
		if _, err := s.RecordClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-1", "inst-b"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		cleanedRun(t, s, "rp-nvme-1")
		clock.Advance(time.Minute)
		if _, ok, _ := s.PreviousTenant(ctx, "compute-1", "rp-nvme-1"); ok {
			t.Fatal("claim and holder from before the clean still named")
		}
		if _, err := s.MarkDormant(ctx, "compute-1", "inst-b", "shelve"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if _, err := s.Reactivate(ctx, "compute-1", "inst-b", "unshelve"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-1"); err != nil || !ok || p.Instance != "inst-b" {
			t.Fatalf("claim reactivated after the clean: %+v %v %v; want inst-b", p, ok, err)
		}
	})
}

// A consumer first seen while a run was going on (a tenant that got the
// device behind a lifted fence, after the run's erase may have begun) is
// not covered by that run's clean, though the clean verdict came later:
// the run is closed cleaned but not returned, and the next run's record,
// and the scan's re-fence, must still know that tenant.
func TestPreviousTenantSeenDuringTheCleanIsNotCovered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-a"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		rs := nvmeRun()
		rs.DeviceRP = "rp-nvme-0"
		run, _, err := s.OpenRun(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-nvme-0", "inst-x"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		runStep(t, s, run.ID, "sanitize", false, StepOK, "")
		if err := s.FinishRun(ctx, run.ID, RunCleaned, "cleaned; not returned: another holder was seen during the run"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-nvme-0"); err != nil || !ok || p.Instance != "inst-x" {
			t.Fatalf("tenant seen during the run, after its clean verdict: %+v %v %v; want inst-x", p, ok, err)
		}
	})
}

// The previous tenant is the last consumer known to hold the device: the
// newer of the last one Placement showed (scans, burns) and the newest
// claim; a consumer seen that also has a claim gets the claim's project.
func TestPreviousTenant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		prev := func() string {
			t.Helper()
			p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-a")
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return "none"
			}
			return p.Instance + "/" + p.Project
		}
		claim := func(inst, project string) {
			t.Helper()
			clock.Advance(time.Minute)
			if _, err := s.RecordClaim(ctx, Claim{Host: "compute-1", InstanceUUID: inst, ProjectID: project, PCI: []PCIDevice{{RPUUID: "rp-a"}}}); err != nil {
				t.Fatal(err)
			}
		}
		saw := func(consumer string) {
			t.Helper()
			clock.Advance(time.Minute)
			if err := s.SawHolder(ctx, "compute-1", "rp-a", consumer); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			do   func()
			want string
		}{
			{func() {}, "none"},
			{func() { claim("inst-1", "proj-1") }, "inst-1/proj-1"},
			{func() { saw("inst-1") }, "inst-1/proj-1"},
			{func() { saw("inst-silent") }, "inst-silent/unknown"}, // repro 2: allocated without a notification
			{func() { saw("inst-silent") }, "inst-silent/unknown"},
			{func() { claim("inst-2", "proj-2") }, "inst-2/proj-2"},
		}
		for i, st := range steps {
			st.do()
			if got := prev(); got != st.want {
				t.Fatalf("step %d: previous tenant %s, want %s", i, got, st.want)
			}
		}
		if p, ok, _ := s.PreviousTenant(ctx, "compute-2", "rp-a"); ok {
			t.Fatalf("another host's device: %+v", p)
		}
	})
}

// TestDeviceAttachedToOlderClaim: a device attached to an instance whose
// claim is older than another tenant's (released) claim of the device is
// held by that instance from the attach: it is the previous tenant, and a
// cleaned run waiting for its un-reserve from before the attach is not
// resumed into one.
func TestDeviceAttachedToOlderClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		if _, err := s.RecordClaim(ctx, gpuClaim("inst-old", "rp-y")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := s.RecordClaim(ctx, gpuClaim("inst-prev", "rp-x")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := s.ReleaseInstance(ctx, "compute-1", "inst-prev", "delete", "m1"); err != nil {
			t.Fatal(err)
		}
		cleaned := cleanedRun(t, s, "rp-x") // un-reserved, then a crash before MarkReturned
		clock.Advance(time.Hour)
		attached := clock.Now()
		c := gpuClaim("inst-old", "rp-y", "rp-x")
		c.MessageID = "msg-attach"
		if created, err := s.RecordClaim(ctx, c); err != nil || !created {
			t.Fatalf("attach: created %v, %v", created, err)
		}
		if last, ok, err := s.LastClaimForDevice(ctx, "compute-1", "rp-x"); err != nil || !ok || last.InstanceUUID != "inst-old" {
			t.Fatalf("LastClaimForDevice(rp-x) = %s, %v, %v; want inst-old, which holds it now", last.InstanceUUID, ok, err)
		}
		prev, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-x")
		if err != nil || !ok || prev.Instance != "inst-old" || !prev.Since.Equal(attached) {
			t.Fatalf("PreviousTenant(rp-x) = %+v, %v, %v; want inst-old since %s", prev, ok, err, attached)
		}
		rs := nvmeRun()
		rs.DeviceRP = "rp-x"
		run, resumed, err := s.OpenRun(ctx, rs)
		if err != nil || resumed || run.ID == cleaned.ID {
			t.Fatalf("OpenRun after the attach = %s, resumed %v, %v; want a new run (the device was used since its clean)", run.ID, resumed, err)
		}
	})
}

// A consumer Placement showed holding the device that the store holds a
// claim of (of another device) is named with that claim's project; one no
// claim names, with project unknown.
func TestPreviousTenantTakesTheProjectOfTheHoldersClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		c := gpuClaim("inst-r", "rp-src")
		c.ProjectID = "proj-r"
		if _, err := s.RecordClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		o := gpuClaim("inst-o", "rp-other")
		o.ProjectID = "proj-o"
		if _, err := s.RecordClaim(ctx, o); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-src", "inst-o"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-src"); err != nil || !ok || p.Instance != "inst-o" || p.Project != "proj-o" {
			t.Fatalf("a claimed instance seen holding the device: %+v %v %v; want inst-o of proj-o", p, ok, err)
		}
		clock.Advance(time.Minute)
		if err := s.SawHolder(ctx, "compute-1", "rp-src", "stranger"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-src"); err != nil || !ok || p.Instance != "stranger" || p.Project != UnknownTenant {
			t.Fatalf("a consumer no claim names: %+v %v %v; want stranger, project unknown", p, ok, err)
		}
	})
}

// A cleaned run closed because its device may have served a tenant after
// the clean that the store never recorded (CloseCleanedUsed: a stale
// return, a re-fence mid-run, an allocation at the un-reserve, an
// un-reserve by someone else) leaves an unseen tenant held: the device
// is held by UnknownTenant (not by the tenant the run erased, whose data
// is gone), so a scan that finds the device un-fenced before a later run
// cleaned it fences it again, and the next record says "unknown"; a
// tenant seen after that run began is named. A run closed otherwise (retired before its
// un-reserve) still counts, and a later clean that counts ends it all.
// SettleReturns' closes are of the first kind: a device allocated, and
// one someone else un-reserved before scour sent its PUT (review M1: it
// sat in the pool, and a tenant may have come and gone unrecorded).
func TestCleanUsedAfterItDoesNotCoverItsTenants(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		for _, rp := range []string{"rp-stale", "rp-retired", "rp-settled"} {
			if err := s.SawHolder(ctx, "compute-1", rp, "inst-a"); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
		runs := map[string]Run{}
		for _, rp := range []string{"rp-stale", "rp-retired", "rp-settled", "rp-nobody", "rp-elsewhere"} {
			runs[rp] = cleanedRun(t, s, rp)
		}
		clock.Advance(time.Minute)
		if err := s.CloseCleanedUsed(ctx, runs["rp-stale"].ID, "the device may have served a tenant since (stale), so a new run cleans it again"); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseCleaned(ctx, runs["rp-retired"].ID, "Placement showed the device quarantined at the un-reserve"); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseCleanedUsed(ctx, runs["rp-nobody"].ID, "a scan fenced it again while this run cleaned it"); err != nil {
			t.Fatal(err)
		}
		// rp-settled allocated; rp-elsewhere un-reserved and free, no PUT
		// of scour's journaled: someone else returned it to the pool.
		if n, err := s.SettleReturns(ctx, "compute-1", func(_ context.Context, rp string) (DeviceNow, error) {
			return DeviceNow{Reserved: rp != "rp-elsewhere", Allocated: rp == "rp-settled"}, nil
		}); err != nil || n != (Settled{Closed: 2, Elsewhere: 1}) {
			t.Fatalf("SettleReturns = %+v, %v; want 2 closed, 1 of them un-reserved elsewhere", n, err)
		}
		clock.Advance(time.Minute)
		for rp, want := range map[string]struct {
			held     bool
			instance string
		}{
			"rp-stale":     {true, UnknownTenant},
			"rp-settled":   {true, UnknownTenant},
			"rp-nobody":    {true, UnknownTenant},
			"rp-elsewhere": {true, UnknownTenant},
			"rp-retired":   {false, ""},
		} {
			p, ok, err := s.PreviousTenant(ctx, "compute-1", rp)
			if err != nil || ok != want.held || p.Instance != want.instance {
				t.Errorf("%s: PreviousTenant = %+v held=%v err=%v; want held=%v by %q", rp, p, ok, err, want.held, want.instance)
			}
			if got, _ := s.GetRun(ctx, runs[rp].ID); got.State != RunCleaned || !got.Closed() {
				t.Errorf("%s: run %s closed=%t; want cleaned, closed", rp, got.State, got.Closed())
			}
		}
		// A tenant seen after the run began is named.
		if err := s.SawHolder(ctx, "compute-1", "rp-settled", "inst-b"); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-settled"); err != nil || !ok || p.Instance != "inst-b" {
			t.Errorf("rp-settled after inst-b was seen: PreviousTenant = %+v held=%v err=%v; want held by inst-b", p, ok, err)
		}
		for _, rp := range []string{"rp-nobody", "rp-elsewhere", "rp-stale"} {
			if p, _, _ := s.PreviousTenant(ctx, "compute-1", rp); p.DeviceRP != rp || p.Project != UnknownTenant {
				t.Errorf("%s: unknown tenant = %+v; want project unknown, known under %s", rp, p, rp)
			}
		}
		// Once a later run's clean counts, nobody is held.
		clock.Advance(time.Minute)
		for _, rp := range []string{"rp-stale", "rp-nobody", "rp-elsewhere"} {
			again := cleanedRun(t, s, rp)
			clock.Advance(time.Minute)
			if err := s.MarkReturned(ctx, again.ID, "un-reserved"); err != nil {
				t.Fatal(err)
			}
			if p, ok, err := s.PreviousTenant(ctx, "compute-1", rp); err != nil || ok {
				t.Errorf("%s after a returned run: PreviousTenant = %+v held=%v err=%v; want none", rp, p, ok, err)
			}
		}
	})
}
