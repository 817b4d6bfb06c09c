package claims

import (
	"context"
	"strings"
	"testing"
	"time"
)

// claimOn records a live claim of instance on rps under host, recorded
// for node.
func claimOn(t *testing.T, s *Store, host, node, instance string, rps ...string) {
	t.Helper()
	c := gpuClaim(instance, rps...)
	c.Host, c.Node = host, node
	if _, err := s.RecordClaim(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// OpenUnderOtherNames counts each other host name's open quarantines,
// open runs, live claims and devices holding a tenant no clean covered
// (released and closed ones, a tenant cleaned since, not), and lists a
// name as this machine's: in a sqlite store every one; in PostgreSQL
// (shared by a fleet) only one whose claims name this scourd's node.
func TestOpenUnderOtherNames(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, _, err := s.Retire(ctx, "cmp-a", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
		rs := nvmeRun()
		rs.Host, rs.DeviceRP = "cmp-a", "rp-2"
		if _, _, err := s.OpenRun(ctx, rs); err != nil {
			t.Fatal(err)
		}
		claimOn(t, s, "cmp-a", "node-1", "inst-1", "rp-3")
		// Another machine's (PostgreSQL), or this state_path's (sqlite).
		claimOn(t, s, "cmp-z", "node-9", "inst-9", "rp-9")
		// Nothing open: a released claim whose device was cleaned since, a
		// released quarantine.
		claimOn(t, s, "cmp-old", "node-1", "inst-old", "rp-5")
		if _, err := s.ReleaseInstance(ctx, "cmp-old", "inst-old", "deleted", "m"); err != nil {
			t.Fatal(err)
		}
		cleaned := runOn(t, s, "cmp-old", "rp-5")
		runStep(t, s, cleaned.ID, "sanitize", false, StepOK, "")
		if err := finish(ctx, s, cleaned.ID, RunReturned, "returned"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Retire(ctx, "cmp-old", "rp-6", "0000:86:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ReleaseQuarantine(ctx, "cmp-old", "rp-6", "bob", "back"); err != nil || !ok {
			t.Fatal(ok, err)
		}
		// This scourd's own records are not another name's.
		claimOn(t, s, "cmp-b", "node-1", "inst-b", "rp-7")

		got, err := s.OpenUnderOtherNames(ctx, "cmp-b", []string{"node-1"})
		if err != nil {
			t.Fatal(err)
		}
		// A live claim's device holds a tenant no clean covered too.
		want := map[string]HostOpen{"cmp-a": {Host: "cmp-a", Quarantines: 1, Runs: 1, Claims: 1, Uncovered: 1}}
		if cfg.Driver == DriverSQLite {
			want["cmp-z"] = HostOpen{Host: "cmp-z", Claims: 1, Uncovered: 1}
		}
		if len(got) != len(want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		for _, h := range got {
			w := want[h.Host]
			if h.Why == "" {
				t.Errorf("%s: no reason given why it is this machine's", h.Host)
			}
			h.Why = ""
			if h != w {
				t.Errorf("got %+v, want %+v", h, w)
			}
		}
		if cfg.Driver == DriverPostgres && !strings.Contains(got[0].Why, "node-1") {
			t.Errorf("why %q does not name the node", got[0].Why)
		}
	})
}

// AdoptHost moves a renamed host's open quarantines, open runs, live
// claims and uncovered previous tenants to the new name, leaving what a
// clean covered (and closed records) under the old one; an open
// quarantine of a device the new name holds quarantined already is closed
// under the old name. Afterwards nothing open is left under the old name,
// and the new one holds the quarantines, resumes the run and knows the
// tenants, by the names and projects their claims gave
// (TestAdoptHostResolvesClashes: both names holding one device or
// instance open).
func TestAdoptHost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		retire := func(host, rp string) {
			t.Helper()
			_, _, err := s.Retire(ctx, host, rp, "0000:81:00.0", "alice", "RMA", "", "")
			must(err)
		}
		retire("cmp-a", "rp-1")
		retire("cmp-a", "rp-3")
		retire("cmp-b", "rp-3")
		rs := nvmeRun()
		rs.Host, rs.DeviceRP = "cmp-a", "rp-2"
		open, _, err := s.OpenRun(ctx, rs)
		must(err)
		claimOn(t, s, "cmp-a", "node-1", "inst-live", "rp-4")
		claimOn(t, s, "cmp-a", "node-1", "inst-gone", "rp-5")
		_, err = s.ReleaseInstance(ctx, "cmp-a", "inst-gone", "deleted", "m1")
		must(err)
		claimOn(t, s, "cmp-a", "node-1", "inst-cleaned", "rp-6")
		_, err = s.ReleaseInstance(ctx, "cmp-a", "inst-cleaned", "deleted", "m2")
		must(err)
		must(s.SawHolder(ctx, "cmp-a", "rp-7", "inst-seen"))
		clock.Advance(time.Minute)
		rs.DeviceRP = "rp-6"
		clean, _, err := s.OpenRun(ctx, rs)
		must(err)
		runStep(t, s, clean.ID, "sanitize", false, StepOK, "")
		must(finish(ctx, s, clean.ID, RunReturned, "returned"))
		clock.Advance(time.Minute)

		got, err := s.AdoptHost(ctx, "cmp-a", "cmp-b", "alice")
		must(err)
		if want := (Adopted{HostOpen: HostOpen{Host: "cmp-a", Quarantines: 1, Runs: 1, Claims: 1}, Superseded: 1, Tenants: 1}); got != want {
			t.Errorf("adopted %+v, want %+v", got, want)
		}
		if left, err := s.OpenUnderOtherNames(ctx, "cmp-b", []string{"node-1"}); err != nil || len(left) != 0 {
			t.Errorf("open under cmp-a after the adopt: %+v, %v", left, err)
		}
		for _, rp := range []string{"rp-1", "rp-3"} {
			if _, ok, err := s.ActiveQuarantine(ctx, "cmp-b", rp); err != nil || !ok {
				t.Errorf("cmp-b's quarantine of %s: %v, %v", rp, ok, err)
			}
		}
		if runs, err := s.UnfinishedRuns(ctx, "cmp-b"); err != nil || len(runs) != 1 || runs[0].ID != open.ID {
			t.Errorf("cmp-b's unfinished runs: %+v, %v; want run %s", runs, err, open.ID)
		}
		if live, err := s.LiveClaims(ctx, "cmp-b"); err != nil || len(live) != 1 || live[0].InstanceUUID != "inst-live" {
			t.Errorf("cmp-b's live claims: %+v, %v", live, err)
		}
		for rp, want := range map[string]Tenant{"rp-4": {Instance: "inst-live", Project: "proj-a"}, "rp-5": {Instance: "inst-gone", Project: "proj-a"},
			"rp-7": {Instance: "inst-seen", Project: UnknownTenant}, "rp-6": {}} {
			p, ok, err := s.PreviousTenant(ctx, "cmp-b", rp)
			if err != nil || ok != (want.Instance != "") || p.Instance != want.Instance || p.Project != want.Project {
				t.Errorf("cmp-b's previous tenant of %s: %+v %v %v; want %+v", rp, p, ok, err, want)
			}
		}
		// Covered by its clean: stays with cmp-a's closed records.
		if p, ok, err := s.PreviousTenant(ctx, "cmp-a", "rp-6"); err != nil || ok {
			t.Errorf("cmp-a's rp-6 tenant after its clean: %+v %v %v", p, ok, err)
		}
		if r, err := s.GetRun(ctx, clean.ID); err != nil || r.Host != "cmp-a" {
			t.Errorf("the closed run moved: %+v, %v", r, err)
		}
	})
}

// A host adopted under its new name takes the tenants no clean of the
// old name covers: a cleaned run closed because its device may have
// served a tenant after its clean (CloseCleanedUsed: a stale return)
// covers the tenants before it, as for PreviousTenant, and leaves an
// unknown tenant held, which the adopt carries: under the new name the
// device is held by that unknown tenant, not named after the tenant the
// run erased (review rev5 F3, rev7 F2).
func TestAdoptHostMovesTenantsAStaleCleanDidNotCover(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		claimOn(t, s, "cmp-a", "node-1", "inst-claimed", "rp-1")
		if _, err := s.ReleaseInstance(ctx, "cmp-a", "inst-claimed", "deleted", "m1"); err != nil {
			t.Fatal(err)
		}
		if err := s.SawHolder(ctx, "cmp-a", "rp-2", "inst-seen"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		for _, rp := range []string{"rp-1", "rp-2"} {
			rs := nvmeRun()
			rs.Host, rs.DeviceRP = "cmp-a", rp
			run, _, err := s.OpenRun(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			runStep(t, s, run.ID, "sanitize", false, StepOK, "")
			if err := s.FinishRun(ctx, run.ID, RunCleaned, "clean"); err != nil {
				t.Fatal(err)
			}
			if err := s.CloseCleanedUsed(ctx, run.ID, "the device may have served a tenant since (stale)"); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
		if _, err := s.AdoptHost(ctx, "cmp-a", "cmp-b", "alice"); err != nil {
			t.Fatal(err)
		}
		for rp, want := range map[string]Tenant{"rp-1": {Instance: UnknownTenant, Project: UnknownTenant}, "rp-2": {Instance: UnknownTenant, Project: UnknownTenant}} {
			if p, ok, err := s.PreviousTenant(ctx, "cmp-b", rp); err != nil || !ok || p.Instance != want.Instance || p.Project != want.Project {
				t.Errorf("cmp-b's previous tenant of %s after a stale clean: %+v %v %v; want %+v", rp, p, ok, err, want)
			}
		}
	})
}

// noErr fails the test on err.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runOn opens a run of device rp under host.
func runOn(t *testing.T, s *Store, host, rp string) Run {
	t.Helper()
	rs := nvmeRun()
	rs.Host, rs.DeviceRP = host, rp
	r, _, err := s.OpenRun(context.Background(), rs)
	noErr(t, err)
	return r
}

// A host renamed before scourd checked for it: scourd ran under the new
// name cmp-b over the devices and instances cmp-a still held open, so
// both names hold an open run of one device, a live claim of one
// instance, an open quarantine of one device, and scourd starts under
// neither. AdoptHost resolves each, in one transaction, with nothing
// lost: cmp-b's run of each device resumes and cmp-a's is closed (signed,
// in cmp-a's chain), as used after its clean when its un-reserve PUT may
// have landed, so the device stays held by an unknown tenant since that
// run began; cmp-b's claim of the instance takes cmp-a's devices and
// volumes, cmp-a's is released; cmp-b's quarantine stands, saying cmp-a's
// reason and taking its pending retirement wipe. Afterwards nothing of
// this machine is open under cmp-a, and each device and instance has one
// open run or live claim.
func TestAdoptHostResolvesClashes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		sg := testSigner(t)
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(sg))
		noErr(t, s.RegisterKey(ctx, "cmp-a"))
		// cmp-a: a run of rp-1 under way; a run of rp-2 cleaned, its
		// un-reserve PUT sent (it may have landed) and its answer lost.
		running := runOn(t, s, "cmp-a", "rp-1")
		runStep(t, s, running.ID, "sanitize", false, StepOK, "")
		sent := runOn(t, s, "cmp-a", "rp-2")
		runStep(t, s, sent.ID, "sanitize", false, StepOK, "")
		noErr(t, s.FinishRun(ctx, sent.ID, RunCleaned, "clean"))
		noErr(t, s.PutJournal(sent.ID).NotePut(ctx, 12))
		_, _, err := s.Retire(ctx, "cmp-a", "rp-4", "0000:84:00.0", "alice", "RMA from cmp-a", WipePending, "")
		noErr(t, err)
		claimOn(t, s, "cmp-a", "node-1", "inst-1", "rp-5")
		noErr(t, s.UpdateVolumes(ctx, "cmp-a", "inst-1", func(v *Volumes) error {
			v.Attached = append(v.Attached, Volume{ID: "vol-a"})
			return nil
		}))
		startedAt := sent.StartedAt
		clock.Advance(time.Minute)

		// scourd under cmp-b, over the same devices and instance.
		keep := map[string]string{"rp-1": runOn(t, s, "cmp-b", "rp-1").ID, "rp-2": runOn(t, s, "cmp-b", "rp-2").ID}
		_, _, err = s.Retire(ctx, "cmp-b", "rp-4", "0000:84:00.0", "bob", "RMA from cmp-b", "", "")
		noErr(t, err)
		claimOn(t, s, "cmp-b", "node-1", "inst-1", "rp-6")
		noErr(t, s.UpdateVolumes(ctx, "cmp-b", "inst-1", func(v *Volumes) error {
			v.Attached = append(v.Attached, Volume{ID: "vol-b"})
			return nil
		}))
		clock.Advance(time.Minute)
		for _, h := range [][2]string{{"cmp-a", "cmp-b"}, {"cmp-b", "cmp-a"}} {
			if left, err := s.OpenUnderOtherNames(ctx, h[1], []string{"node-1"}); err != nil || len(left) != 1 {
				t.Fatalf("start as %s over %s's records: %+v, %v; want refused", h[1], h[0], left, err)
			}
		}

		got, err := s.AdoptHost(ctx, "cmp-a", "cmp-b", "alice")
		noErr(t, err)
		if want := (Adopted{HostOpen: HostOpen{Host: "cmp-a", Uncovered: 1}, Superseded: 1, RunsSuperseded: 2, RunsUsed: 1, ClaimsMerged: 1}); got != want {
			t.Errorf("adopted %+v, want %+v", got, want)
		}
		if left, err := s.OpenUnderOtherNames(ctx, "cmp-b", []string{"node-1"}); err != nil || len(left) != 0 {
			t.Errorf("open under another name than cmp-b after the adopt: %+v, %v", left, err)
		}
		for _, h := range []string{"cmp-a", "cmp-b"} {
			runs, err := s.UnfinishedRuns(ctx, h)
			noErr(t, err)
			for _, r := range runs {
				if h == "cmp-a" || keep[r.DeviceRP] != r.ID {
					t.Errorf("open run %s of %s under %s after the adopt; want cmp-b's %v only", r.ID, r.DeviceRP, h, keep)
				}
				delete(keep, r.DeviceRP)
			}
		}
		if len(keep) > 0 {
			t.Errorf("cmp-b's runs not open after the adopt: %v", keep)
		}
		for _, c := range []struct {
			run  Run
			used bool
		}{{running, false}, {sent, true}} {
			r, err := s.GetRun(ctx, c.run.ID)
			if err != nil || r.Host != "cmp-a" || !r.Closed() || !strings.Contains(r.Summary, "superseded: host cmp-a adopted as cmp-b") {
				t.Errorf("cmp-a's run %s of %s after the adopt: %+v, %v; want closed under cmp-a as superseded", c.run.ID, c.run.DeviceRP, r, err)
			}
			if c.used && !strings.Contains(r.Summary, "may have returned it") {
				t.Errorf("closed run %s does not say its un-reserve may have landed: %q", r.ID, r.Summary)
			}
		}
		if rep, err := s.VerifyHost(ctx, "cmp-a", nil); err != nil || rep.Records != 2 || rep.Unsigned != 0 {
			t.Errorf("cmp-a's records after the adopt closed its runs: %+v, %v; want 2 signed", rep, err)
		}
		// rp-2 may have served a tenant since cmp-a's clean: held, by an
		// unknown one since that run began, under the new name.
		if p, ok, err := s.PreviousTenant(ctx, "cmp-b", "rp-2"); err != nil || !ok || p.Instance != UnknownTenant || !p.Since.Equal(startedAt) {
			t.Errorf("cmp-b's previous tenant of rp-2: %+v %v %v; want unknown since %s", p, ok, err, startedAt)
		}
		live, err := s.LiveClaims(ctx, "cmp-b")
		noErr(t, err)
		if len(live) != 1 || live[0].InstanceUUID != "inst-1" || !live[0].HasDevice("rp-5") || !live[0].HasDevice("rp-6") ||
			len(live[0].Volumes.Attached) != 2 {
			t.Errorf("cmp-b's live claims: %+v; want inst-1's with rp-5, rp-6, vol-a and vol-b", live)
		}
		for _, rp := range []string{"rp-5", "rp-6"} {
			if c, ok, err := s.ActiveClaimForDevice(ctx, "cmp-b", rp); err != nil || !ok || c.InstanceUUID != "inst-1" {
				t.Errorf("cmp-b's active claim of %s: %+v %v %v; want inst-1's (in use: nothing cleans it)", rp, c, ok, err)
			}
		}
		if old, err := s.ClaimsForInstance(ctx, "cmp-a", "inst-1"); err != nil || len(old) != 1 || old[0].Live() ||
			!strings.Contains(old[0].ReleaseReason, "superseded") {
			t.Errorf("cmp-a's claims of inst-1: %+v, %v; want one, released as superseded", old, err)
		}
		q, ok, err := s.ActiveQuarantine(ctx, "cmp-b", "rp-4")
		if err != nil || !ok || !strings.Contains(q.Reason, "RMA from cmp-b") || !strings.Contains(q.Reason, "RMA from cmp-a") || q.Wipe != WipePending {
			t.Errorf("cmp-b's quarantine of rp-4: %+v %v %v; want its reason, cmp-a's, and cmp-a's pending wipe", q, ok, err)
		}
	})
}

// A device whose last clean under the old name was closed as possibly
// used after it (CloseCleanedUsed: a stale return) holds data of a tenant
// nobody recorded. That is all the old name has open, and it is enough:
// scourd does not start under the new name over it, and AdoptHost
// records the device held under the new name by an unknown tenant since
// that run began, as PreviousTenant under the old name said. A device the
// new name cleaned since is no such device.
func TestAdoptHostCarriesTheTenantOfACleanUsedAfterIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		clean := func(host, rp string, used bool) Run {
			t.Helper()
			r := runOn(t, s, host, rp)
			runStep(t, s, r.ID, "sanitize", false, StepOK, "")
			if !used {
				noErr(t, finish(ctx, s, r.ID, RunReturned, "returned"))
				return r
			}
			noErr(t, s.FinishRun(ctx, r.ID, RunCleaned, "clean"))
			noErr(t, s.CloseCleanedUsed(ctx, r.ID, "the device may have served a tenant since (stale)"))
			return r
		}
		// Ties cmp-a to node-1 on PostgreSQL; cleaned since, so nothing.
		claimOn(t, s, "cmp-a", "node-1", "inst-old", "rp-9")
		_, err := s.ReleaseInstance(ctx, "cmp-a", "inst-old", "deleted", "m1")
		noErr(t, err)
		clean("cmp-a", "rp-9", false)
		used := clean("cmp-a", "rp-1", true)
		clean("cmp-a", "rp-2", true)
		clock.Advance(time.Minute)
		clean("cmp-b", "rp-2", false) // the new name cleaned rp-2 since
		clock.Advance(time.Minute)

		left, err := s.OpenUnderOtherNames(ctx, "cmp-b", []string{"node-1"})
		if err != nil || len(left) != 1 || left[0].Host != "cmp-a" || left[0].Uncovered != 1 || left[0].Quarantines+left[0].Runs+left[0].Claims != 0 {
			t.Fatalf("open under other names than cmp-b: %+v, %v; want cmp-a with rp-1 uncovered", left, err)
		}
		got, err := s.AdoptHost(ctx, "cmp-a", "cmp-b", "alice")
		noErr(t, err)
		if got.Uncovered != 1 {
			t.Errorf("adopted %+v; want rp-1 recorded held", got)
		}
		if p, ok, err := s.PreviousTenant(ctx, "cmp-b", "rp-1"); err != nil || !ok || p.Instance != UnknownTenant || !p.Since.Equal(used.StartedAt) {
			t.Errorf("cmp-b's previous tenant of rp-1: %+v %v %v; want unknown since %s", p, ok, err, used.StartedAt)
		}
		if p, ok, err := s.PreviousTenant(ctx, "cmp-b", "rp-2"); err != nil || ok {
			t.Errorf("cmp-b's previous tenant of rp-2, cleaned under cmp-b since: %+v %v %v; want none", p, ok, err)
		}
		if left, err := s.OpenUnderOtherNames(ctx, "cmp-b", []string{"node-1"}); err != nil || len(left) != 0 {
			t.Errorf("open under other names than cmp-b after the adopt: %+v, %v", left, err)
		}
	})
}
