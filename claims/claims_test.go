package claims

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestRecordClaimIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		c := gpuClaim("inst-1", "rp-a")

		created, err := s.RecordClaim(ctx, c)
		if err != nil || !created {
			t.Fatalf("first RecordClaim = %v, %v; want created", created, err)
		}
		first, _ := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		for i := 0; i < 3; i++ {
			if created, err := s.RecordClaim(ctx, c); err != nil || created {
				t.Fatalf("replay %d: RecordClaim = %v, %v; want not created", i, created, err)
			}
		}
		again, _ := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		if len(again) != 1 || !again[0].UpdatedAt.Equal(first[0].UpdatedAt) || again[0].ID != first[0].ID {
			t.Fatalf("replay changed the claim: before %+v after %+v", first, again)
		}

		// The resize target is a second claim; an added device joins the
		// live claim.
		target := c
		target.ResizeTarget, target.MessageID = true, "msg-resize"
		if created, err := s.RecordClaim(ctx, target); err != nil || !created {
			t.Fatalf("resize target RecordClaim = %v, %v; want created", created, err)
		}
		attach := gpuClaim("inst-1", "rp-a", "rp-b")
		attach.MessageID = "msg-attach"
		if created, err := s.RecordClaim(ctx, attach); err != nil || !created {
			t.Fatalf("attach RecordClaim = %v, %v; want created (device added)", created, err)
		}
		all, err := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		if err != nil || len(all) != 2 {
			t.Fatalf("ClaimsForInstance = %d claims, %v; want 2", len(all), err)
		}
		src := all[0]
		if all[1].ResizeTarget == false {
			src = all[1]
		}
		if len(src.PCI) != 2 || !src.HasDevice("rp-b") || src.LastMessageID != "msg-attach" || src.MessageID != "msg-inst-1" {
			t.Fatalf("source claim after attach = %+v", src)
		}
		if src.State != ClaimActive || src.CreatedAt.IsZero() || src.Host != "compute-1" || src.VCPUs != 4 || src.PCI[0].Address != "0000:80:00.0" {
			t.Fatalf("claim fields not stored: %+v", src)
		}
	})
}

func TestRecordClaimReplayAfterRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		c := gpuClaim("inst-2", "rp-a")
		if _, err := s.RecordClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if n, err := s.ReleaseInstance(ctx, c.Host, c.InstanceUUID, "instance.delete.end", "msg-del"); err != nil || n != 1 {
			t.Fatalf("ReleaseInstance = %d, %v; want 1", n, err)
		}
		// A redelivered create must not resurrect the claim...
		if created, err := s.RecordClaim(ctx, c); err != nil || created {
			t.Fatalf("replay after release = %v, %v; want ignored", created, err)
		}
		// ...but a new claim (new message) for the same instance and device is one.
		c.MessageID = "msg-new"
		if created, err := s.RecordClaim(ctx, c); err != nil || !created {
			t.Fatalf("new claim after release = %v, %v; want created", created, err)
		}
		if _, ok, _ := s.ActiveClaimForDevice(ctx, c.Host, "rp-a"); !ok {
			t.Fatal("new claim does not hold rp-a")
		}
	})
}

func TestRecordClaimInvalid(t *testing.T) {
	s := mustOpen(t, backends[0].cfg(t))
	_, err := s.RecordClaim(context.Background(), Claim{PCI: []PCIDevice{{Address: "0000:81:00.0"}}})
	if !errors.Is(err, ErrInvalidClaim) {
		t.Fatalf("err = %v, want ErrInvalidClaim", err)
	}
	for _, want := range []string{"host is empty", "instance_uuid is empty", `pci[0] (address "0000:81:00.0")`} {
		if !containsStr(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestClaimTransitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		c := gpuClaim("inst-3", "rp-a")
		if _, err := s.RecordClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name  string
			do    func() (int, error)
			want  int
			state ClaimState
		}{
			{"shelve offload", func() (int, error) { return s.MarkDormant(ctx, c.Host, c.InstanceUUID, "m1") }, 1, ClaimDormant},
			{"shelve again", func() (int, error) { return s.MarkDormant(ctx, c.Host, c.InstanceUUID, "m1") }, 0, ClaimDormant},
			{"unshelve", func() (int, error) { return s.Reactivate(ctx, c.Host, c.InstanceUUID, "m2") }, 1, ClaimActive},
			{"unshelve again", func() (int, error) { return s.Reactivate(ctx, c.Host, c.InstanceUUID, "m2") }, 0, ClaimActive},
			{"delete", func() (int, error) {
				return s.ReleaseInstance(ctx, c.Host, c.InstanceUUID, "instance.delete.end", "m3")
			}, 1, ClaimReleased},
			{"delete again", func() (int, error) {
				return s.ReleaseInstance(ctx, c.Host, c.InstanceUUID, "instance.delete.end", "m3")
			}, 0, ClaimReleased},
			{"unshelve released", func() (int, error) { return s.Reactivate(ctx, c.Host, c.InstanceUUID, "m4") }, 0, ClaimReleased},
		}
		for _, st := range steps {
			clock.Advance(time.Second)
			n, err := st.do()
			if err != nil || n != st.want {
				t.Fatalf("%s: n=%d err=%v; want %d", st.name, n, err, st.want)
			}
			cs, _ := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
			if len(cs) != 1 || cs[0].State != st.state {
				t.Fatalf("%s: claims %+v; want one in state %s", st.name, cs, st.state)
			}
		}
		cs, _ := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		got := cs[0]
		t0 := newFakeClock().Now()
		if got.DormantAt == nil || !got.DormantAt.Equal(t0.Add(1*time.Second)) ||
			got.ReactivatedAt == nil || !got.ReactivatedAt.Equal(t0.Add(3*time.Second)) ||
			got.ReleasedAt == nil || !got.ReleasedAt.Equal(t0.Add(5*time.Second)) ||
			got.ReleaseReason != "instance.delete.end" || got.LastMessageID != "m3" || !got.CreatedAt.Equal(t0) {
			t.Fatalf("transition timestamps wrong: %+v", got)
		}
		if _, ok, _ := s.ActiveClaimForDevice(ctx, c.Host, "rp-a"); ok {
			t.Fatal("released claim still active for rp-a")
		}
		last, ok, err := s.LastClaimForDevice(ctx, c.Host, "rp-a")
		if err != nil || !ok || last.InstanceUUID != "inst-3" || last.ProjectID != "proj-a" {
			t.Fatalf("LastClaimForDevice = %+v %v %v", last, ok, err)
		}
	})
}

func TestResizeClaims(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		src := gpuClaim("inst-r", "rp-a")
		dst := gpuClaim("inst-r", "rp-b")
		dst.ResizeTarget, dst.MessageID = true, "msg-resize"
		for _, c := range []Claim{src, dst} {
			if _, err := s.RecordClaim(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		// Confirm: the source claim ends, the target stays.
		if n, err := s.ReleaseResizeClaim(ctx, src.Host, src.InstanceUUID, false, "resize_confirm.end", "m"); err != nil || n != 1 {
			t.Fatalf("ReleaseResizeClaim = %d, %v", n, err)
		}
		if _, ok, _ := s.ActiveClaimForDevice(ctx, src.Host, "rp-a"); ok {
			t.Fatal("rp-a still claimed after confirm")
		}
		if c, ok, _ := s.ActiveClaimForDevice(ctx, src.Host, "rp-b"); !ok || !c.ResizeTarget {
			t.Fatalf("rp-b claim after confirm = %+v %v", c, ok)
		}
	})
}

func TestDeviceLookupEscapesLike(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, err := s.RecordClaim(ctx, gpuClaim("inst-l", "rp_a%")); err != nil {
			t.Fatal(err)
		}
		for rp, want := range map[string]bool{"rp_a%": true, "rpXaY": false, "rp_a": false, "%": false} {
			if _, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", rp); err != nil || ok != want {
				t.Errorf("ActiveClaimForDevice(%q) = %v, %v; want %v", rp, ok, err, want)
			}
		}
	})
}

func TestSweepOrphans(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.ClaimExpiry = 300 * time.Second
		s := mustOpen(t, cfg, WithClock(clock.Now))
		for _, inst := range []string{"gone", "alive", "shelved", "young-gone"} {
			if inst == "young-gone" {
				clock.Advance(250 * time.Second)
			}
			if _, err := s.RecordClaim(ctx, gpuClaim(inst, "rp-"+inst)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.MarkDormant(ctx, "compute-1", "shelved", "m"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		asked := map[string]int{}
		hasAlloc := func(_ context.Context, inst string) (bool, error) {
			mu.Lock()
			asked[inst]++
			mu.Unlock()
			return inst == "alive", nil
		}

		// 250 s after the first claims: nothing is old enough yet.
		if got, err := s.SweepOrphans(ctx, "compute-1", hasAlloc); err != nil || len(got) != 0 {
			t.Fatalf("early sweep orphaned %+v, %v", got, err)
		}
		clock.Advance(51 * time.Second) // first three are 301 s old, young-gone 51 s
		got, err := s.SweepOrphans(ctx, "compute-1", hasAlloc)
		if err != nil || len(got) != 1 || got[0].InstanceUUID != "gone" || got[0].State != ClaimOrphaned {
			t.Fatalf("sweep = %+v, %v; want only 'gone' orphaned", got, err)
		}
		if asked["shelved"] != 0 || asked["young-gone"] != 0 || asked["alive"] != 1 || asked["gone"] != 1 {
			t.Fatalf("allocation checks = %v; dormant and young claims must not be checked", asked)
		}
		for inst, want := range map[string]ClaimState{"gone": ClaimOrphaned, "alive": ClaimActive, "shelved": ClaimDormant, "young-gone": ClaimActive} {
			cs, _ := s.ClaimsForInstance(ctx, "compute-1", inst)
			if len(cs) != 1 || cs[0].State != want {
				t.Errorf("%s: %+v, want state %s", inst, cs, want)
			}
		}
		// Days later the dormant claim still survives; young-gone goes.
		clock.Advance(72 * time.Hour)
		got, err = s.SweepOrphans(ctx, "compute-1", hasAlloc)
		if err != nil || len(got) != 1 || got[0].InstanceUUID != "young-gone" {
			t.Fatalf("late sweep = %+v, %v; want only young-gone", got, err)
		}
		// Unshelve restarts the expiry clock.
		if _, err := s.Reactivate(ctx, "compute-1", "shelved", "m2"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.SweepOrphans(ctx, "compute-1", hasAlloc); len(got) != 0 {
			t.Fatalf("just-unshelved claim orphaned: %+v", got)
		}
		// A failing Placement check orphans nothing and says which instance.
		clock.Advance(time.Hour)
		_, err = s.SweepOrphans(ctx, "compute-1", func(context.Context, string) (bool, error) { return false, errors.New("placement 503") })
		if err == nil || !containsStr(err.Error(), "placement 503") {
			t.Fatalf("sweep with failing check: %v", err)
		}
	})
}

func TestUpdateVolumesNoLostUpdates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		c := gpuClaim("inst-v", "rp-a")
		target := gpuClaim("inst-v", "rp-b")
		target.ResizeTarget, target.MessageID = true, "m-r"
		for _, x := range []Claim{c, target} {
			if _, err := s.RecordClaim(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		const workers, each = 6, 10
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					id := fmt.Sprintf("vol-%d-%d", w, i)
					errs <- s.UpdateVolumes(ctx, c.Host, c.InstanceUUID, func(v *Volumes) error {
						v.Attached = append(v.Attached, Volume{ID: id, IsRoot: id == "vol-0-0"})
						v.RootDetached = !v.RootDetached
						return nil
					})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("UpdateVolumes: %v", err)
			}
		}
		cs, _ := s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		for _, cl := range cs {
			seen := map[string]bool{}
			for _, v := range cl.Volumes.Attached {
				seen[v.ID] = true
			}
			if len(cl.Volumes.Attached) != workers*each || len(seen) != workers*each {
				t.Fatalf("claim %s has %d volumes (%d distinct), want %d: lost updates", cl.ID, len(cl.Volumes.Attached), len(seen), workers*each)
			}
			if cl.Volumes.RootDetached { // toggled an even number of times
				t.Fatalf("root_volume_detached = true after %d toggles", workers*each)
			}
		}
		err := s.UpdateVolumes(ctx, c.Host, "no-such-instance", func(*Volumes) error { return nil })
		if !errors.Is(err, ErrNoClaim) {
			t.Fatalf("UpdateVolumes without claim: %v, want ErrNoClaim", err)
		}
		boom := errors.New("boom")
		if err := s.UpdateVolumes(ctx, c.Host, c.InstanceUUID, func(v *Volumes) error { v.Attached = nil; return boom }); !errors.Is(err, boom) {
			t.Fatalf("closure error not returned: %v", err)
		}
		cs, _ = s.ClaimsForInstance(ctx, c.Host, c.InstanceUUID)
		if len(cs[0].Volumes.Attached) != workers*each {
			t.Fatal("a failed closure changed the volumes")
		}
	})
}

func TestConcurrentRecordClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		const workers = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		var firstErr error
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					// Every worker records the same five claims and one of its own.
					c := gpuClaim(fmt.Sprintf("shared-%d", i), fmt.Sprintf("rp-%d", i))
					own := gpuClaim(fmt.Sprintf("own-%d-%d", w, i), fmt.Sprintf("rp-own-%d-%d", w, i))
					for _, x := range []Claim{c, own} {
						ok, err := s.RecordClaim(ctx, x)
						mu.Lock()
						if ok {
							created++
						}
						if err != nil && firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatalf("concurrent RecordClaim: %v", firstErr)
		}
		if want := 5 + workers*5; created != want {
			t.Fatalf("created %d claims, want %d (each shared claim exactly once)", created, want)
		}
		live, _ := s.LiveClaims(ctx, "compute-1")
		if len(live) != 5+workers*5 {
			t.Fatalf("%d live claims, want %d", len(live), 5+workers*5)
		}
	})
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// LiveClaimHosts names every host of a shared database that holds an
// active or dormant claim of the instance, and none whose claim ended.
func TestLiveClaimHosts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		src := gpuClaim("inst-r", "rp-a")
		dst := gpuClaim("inst-r", "rp-b")
		dst.Host, dst.Node, dst.ResizeTarget, dst.MessageID = "compute-2", "compute-2", true, "msg-resize"
		gone := gpuClaim("inst-r", "rp-c")
		gone.Host, gone.Node = "compute-3", "compute-3"
		shelved := gpuClaim("inst-s", "rp-d")
		for _, c := range []Claim{src, dst, gone, shelved} {
			if _, err := s.RecordClaim(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ReleaseInstance(ctx, "compute-3", "inst-r", "instance.delete.end", "msg-del"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkDormant(ctx, "compute-1", "inst-s", "msg-shelve"); err != nil {
			t.Fatal(err)
		}
		for inst, want := range map[string]string{"inst-r": "[compute-1 compute-2]", "inst-s": "[compute-1]", "inst-unknown": "[]"} {
			hosts, err := s.LiveClaimHosts(ctx, inst)
			if got := fmt.Sprint(hosts); err != nil || got != want {
				t.Errorf("LiveClaimHosts(%s) = %s, %v; want %s", inst, got, err, want)
			}
		}
	})
}

// A device's history grows with every tenant: the newest claim is found
// among many, and a device whose id another's starts with is not
// confused with it.
func TestLastClaimForDeviceInLongHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		for i := 0; i < 20; i++ {
			clock.Advance(time.Second)
			inst := fmt.Sprintf("tenant-%02d", i)
			if _, err := s.RecordClaim(ctx, gpuClaim(inst, "rp-1")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ReleaseInstance(ctx, "compute-1", inst, "instance.delete.end", "del-"+inst); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 10; i++ { // newer, on rp-10
			clock.Advance(time.Second)
			if _, err := s.RecordClaim(ctx, gpuClaim(fmt.Sprintf("other-%02d", i), "rp-10")); err != nil {
				t.Fatal(err)
			}
		}
		c, ok, err := s.LastClaimForDevice(ctx, "compute-1", "rp-1")
		if err != nil || !ok || c.InstanceUUID != "tenant-19" {
			t.Fatalf("LastClaimForDevice(rp-1) = %s, %v, %v; want tenant-19", c.InstanceUUID, ok, err)
		}
		if c, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", "rp-1"); err != nil || ok {
			t.Fatalf("ActiveClaimForDevice(rp-1) = %s, %v, %v; want none (all released)", c.InstanceUUID, ok, err)
		}
		if c, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", "rp-10"); err != nil || !ok || c.InstanceUUID != "other-09" {
			t.Fatalf("ActiveClaimForDevice(rp-10) = %s, %v, %v; want other-09", c.InstanceUUID, ok, err)
		}
	})
}
