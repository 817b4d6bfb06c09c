package handlers_test

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/placement"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/internal/testkit"
)

// Revert is a broadcast: the destination (no allocation any more) releases
// its claim and cleans; the source (allocation back) keeps its claim.
func TestRevertBroadcast(t *testing.T) {
	t.Parallel()
	src, dst := newEnv(t, 1, nil), newEnv(t, 1, nil)
	src.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	src.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	// resize to dst: the source allocation moves to the migration consumer
	src.w.Move("00000000-0000-4000-8000-000000000001", "mig-1", rp(1))
	dst.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	dst.handle(cmd(command.KindClaim, "instance.resize_finish.end", "00000000-0000-4000-8000-000000000001"))
	// revert: Nova frees the destination and gives the source back
	dst.w.Free("00000000-0000-4000-8000-000000000001")
	src.w.Move("mig-1", "00000000-0000-4000-8000-000000000001", rp(1))
	for _, e := range []*env{src, dst} {
		rv := cmd(command.KindRevert, "instance.resize_revert.end", "00000000-0000-4000-8000-000000000001")
		rv.Scope, rv.Host = command.ScopeBroadcast, ""
		e.handle(rv)
		e.handle(rv) // duplicate broadcast
		e.reconcile()
	}
	if got := dst.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimReleased {
		t.Errorf("destination claim = %q, want released", got)
	}
	dst.wantDevice(1, placement.StateAvailable, 1, 1)
	if got := src.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimActive {
		t.Errorf("source claim = %q, want active", got)
	}
	src.wantDevice(1, placement.StateBurnedInUse, 0, 0)
}

// A resize confirm is a broadcast (a cross-cell confirm comes from
// nova-conductor, whose publisher names no compute): the source, whose
// claim nothing backs any more, releases and cleans; the destination, where
// the instance now runs, keeps its claim and takes the confirm for what it
// is, not for a forged or early notification.
func TestConfirmBroadcast(t *testing.T) {
	t.Parallel()
	const inst = "00000000-0000-4000-8000-000000000001"
	src, dst := newEnv(t, 1, nil), newEnv(t, 1, nil)
	dstLog := &testkit.SyncBuffer{}
	dst.logs = dstLog
	dst.build(nil)
	src.w.Allocate(inst, true, rp(1))
	src.handle(cmd(command.KindClaim, "instance.create.end", inst))
	src.w.Move(inst, "mig-1", rp(1))
	dst.w.Allocate(inst, true, rp(1))
	dst.handle(cmd(command.KindClaim, "instance.resize_finish.end", inst))
	// confirm: Nova drops the migration's allocation on the source
	src.w.Free("mig-1")
	for _, e := range []*env{src, dst} {
		cf := cmd(command.KindMoveSource, "instance.resize_confirm.end", inst)
		cf.Scope, cf.Host = command.ScopeBroadcast, ""
		e.handle(cf)
		e.handle(cf) // duplicate broadcast
		e.reconcile()
	}
	if got := src.claimState(inst, 1); got != handlers.ClaimReleased {
		t.Errorf("source claim = %q, want released", got)
	}
	src.wantDevice(1, placement.StateAvailable, 1, 1)
	if got := dst.claimState(inst, 1); got != handlers.ClaimActive {
		t.Errorf("destination claim = %q, want active", got)
	}
	dst.wantDevice(1, placement.StateBurnedInUse, 0, 0)
	if strings.Contains(dstLog.String(), "level=WARN") {
		t.Errorf("the destination warned about the confirm broadcast:\n%s", dstLog.String())
	}
}

// The source of a confirmed resize or a live migration releases its claim;
// the device is cleaned only once the migration allocation is gone too.
func TestMoveSource(t *testing.T) {
	t.Parallel()
	for _, ev := range []string{"instance.resize_confirm.end", "instance.live_migration_post.end"} {
		t.Run(ev, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
			e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
			e.w.Move("00000000-0000-4000-8000-000000000001", "mig-1", rp(1)) // instance now holds a device elsewhere
			e.handle(cmd(command.KindMoveSource, ev, "00000000-0000-4000-8000-000000000001"))
			e.reconcile()
			if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimReleased {
				t.Errorf("claim = %q, want released", got)
			}
			e.wantDevice(1, placement.StateBurnedInUse, 0, 0) // migration still holds it
			e.w.Free("mig-1")
			e.reconcile()
			e.wantDevice(1, placement.StateAvailable, 1, 1)
		})
	}
}

// Shelve offload: the device is cleaned, the claim sleeps (surviving the
// orphan sweep) and carries the root-volume state into the unshelve claim.
func TestShelveOffloadThenUnshelve(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	create := cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
	create.Volumes = []string{"10000000-0000-4000-8000-000000000004", "10000000-0000-4000-8000-000000000005"}
	e.handle(create)
	e.handle(&command.Command{Version: 1, Kind: command.KindVolume, Scope: command.ScopeHost, Host: "compute1",
		InstanceUUID: "00000000-0000-4000-8000-000000000001", EventType: "instance.volume_attach.end", State: "active",
		Volume: &command.VolumeChange{Action: "attach", VolumeID: "10000000-0000-4000-8000-000000000004", IsRoot: true}})

	e.w.Free("00000000-0000-4000-8000-000000000001")
	e.handle(cmd(command.KindShelveOffload, "instance.shelve_offload.end", "00000000-0000-4000-8000-000000000001"))
	e.reconcile()
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimDormant {
		t.Fatalf("claim after shelve offload = %q, want dormant", got)
	}
	e.wantDevice(1, placement.StateAvailable, 1, 1)

	e.clock.Advance(24 * 3600e9) // a day shelved: dormant claims are no orphans
	e.reconcile()
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimDormant {
		t.Fatalf("dormant claim after a day = %q, want dormant", got)
	}
	detach := &command.Command{Version: 1, Kind: command.KindVolume, Scope: command.ScopeBroadcast,
		InstanceUUID: "00000000-0000-4000-8000-000000000001", EventType: "instance.volume_detach.end", State: "shelved_offloaded",
		Volume: &command.VolumeChange{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000004", IsRoot: true}}
	e.handle(detach)

	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(2))
	e.handle(cmd(command.KindClaim, "instance.unshelve.end", "00000000-0000-4000-8000-000000000001"))
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimReleased {
		t.Errorf("old dormant claim = %q, want released (superseded)", got)
	}
	c, _ := e.c.ForDevice("00000000-0000-4000-8000-000000000001", rp(2))
	if c.State != handlers.ClaimActive || !c.Volumes.RootDetached ||
		!slices.Equal(c.Volumes.Attached, []handlers.Volume{{ID: "10000000-0000-4000-8000-000000000005"}}) {
		t.Errorf("unshelve claim = %+v, want active, no root volume, [vol-data]", c)
	}
}

// Unshelve on the same device the instance held: the dormant claim wakes.
func TestUnshelveSameDeviceReactivates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	e.w.Free("00000000-0000-4000-8000-000000000001")
	e.handle(cmd(command.KindShelveOffload, "instance.shelve_offload.end", "00000000-0000-4000-8000-000000000001"))
	e.reconcile()
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	e.handle(cmd(command.KindClaim, "instance.unshelve.end", "00000000-0000-4000-8000-000000000001"))
	if got := e.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimActive {
		t.Errorf("claim = %q, want active", got)
	}
	if n := len(e.c.All()); n != 1 {
		t.Errorf("claims = %d, want 1", n)
	}
}

// A broadcast costs a scan only on hosts that know the instance.
func TestBroadcastScansOnlyInvolvedHosts(t *testing.T) {
	t.Parallel()
	involved, bystander := newEnv(t, 1, nil), newEnv(t, 1, nil)
	involved.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	involved.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
	for _, e := range []*env{involved, bystander} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- e.r.Run(ctx) }()
		waitFor(t, func() bool { return e.w.Count("scan", "") == 1 }) // the start scan
		if e == involved {
			e.w.Free("00000000-0000-4000-8000-000000000001") // deleted after the start scan: only the broadcast can find it
		}
		del := cmd(command.KindRelease, "instance.delete.end", "00000000-0000-4000-8000-000000000001")
		del.Scope, del.Host = command.ScopeBroadcast, ""
		e.handle(del)
		if e == involved {
			waitFor(t, func() bool { return e.state(1) == placement.StateAvailable })
		} else {
			time.Sleep(50 * time.Millisecond) // give a wrongly triggered scan time to happen
		}
		cancel()
		<-done
	}
	if got := bystander.w.Count("scan", ""); got != 1 {
		t.Errorf("bystander scans = %d, want 1 (start only)", got)
	}
	if got := involved.claimState("00000000-0000-4000-8000-000000000001", 1); got != handlers.ClaimReleased {
		t.Errorf("involved claim = %q, want released", got)
	}
}

// Reconcile commands: an operator's scans always; the evacuate broadcast
// only where the instance is known.
func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		scope    command.Scope
		instance string
		known    bool
		scans    bool
	}{
		{"operator, host-scoped", command.ScopeHost, "", false, true},
		{"operator, broadcast", command.ScopeBroadcast, "", false, true},
		{"evacuate, instance known here", command.ScopeBroadcast, "00000000-0000-4000-8000-000000000001", true, true},
		{"evacuate, instance unknown here", command.ScopeBroadcast, "00000000-0000-4000-8000-000000000001", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			if tt.known {
				e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
				e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- e.r.Run(ctx) }()
			waitFor(t, func() bool { return e.w.Count("scan", "") == 1 })
			c := cmd(command.KindReconcile, "instance.evacuate", tt.instance)
			if tt.scope == command.ScopeBroadcast {
				c.Scope, c.Host = command.ScopeBroadcast, ""
			}
			e.handle(c)
			if tt.scans {
				waitFor(t, func() bool { return e.w.Count("scan", "") == 2 })
			} else {
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			<-done
			if got, want := e.w.Count("scan", ""), map[bool]int{true: 2, false: 1}[tt.scans]; got != want {
				t.Errorf("scans = %d, want %d", got, want)
			}
		})
	}
}

// A same-host resize has two claims; confirm releases the source side,
// revert the target side, and only the side left is cleaned.
func TestSameHostResize(t *testing.T) {
	t.Parallel()
	for _, confirm := range []bool{true, false} {
		t.Run(map[bool]string{true: "confirm", false: "revert"}[confirm], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2, nil)
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
			e.handle(cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001"))
			e.w.Move("00000000-0000-4000-8000-000000000001", "mig-1", rp(1))
			e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(2))
			e.handle(cmd(command.KindClaim, "instance.resize_finish.end", "00000000-0000-4000-8000-000000000001"))
			e.handle(cmd(command.KindClaim, "instance.resize_finish.end", "00000000-0000-4000-8000-000000000001")) // replay
			if n := len(e.c.All()); n != 2 {
				t.Fatalf("claims during the resize = %d, want 2 (source and target)", n)
			}
			if c, _ := e.c.ForDevice("00000000-0000-4000-8000-000000000001", rp(2)); !c.ResizeTarget {
				t.Errorf("claim on the new device is not the resize target: %+v", c)
			}
			left, kept := 1, 2
			if confirm {
				e.w.Free("mig-1")
				cf := cmd(command.KindMoveSource, "instance.resize_confirm.end", "00000000-0000-4000-8000-000000000001")
				cf.Scope, cf.Host = command.ScopeBroadcast, "" // as the dispatcher sends it
				e.handle(cf)
			} else {
				e.w.Set(rp(2), func(d *handlers.Device) { d.Consumers = nil })
				e.w.Move("mig-1", "00000000-0000-4000-8000-000000000001", rp(1))
				rv := cmd(command.KindRevert, "instance.resize_revert.end", "00000000-0000-4000-8000-000000000001")
				rv.Scope, rv.Host = command.ScopeBroadcast, ""
				e.handle(rv)
				left, kept = 2, 1
			}
			e.reconcile()
			if got := e.claimState("00000000-0000-4000-8000-000000000001", left); got != handlers.ClaimReleased {
				t.Errorf("claim on the side left (%s) = %q, want released", rp(left), got)
			}
			if got := e.claimState("00000000-0000-4000-8000-000000000001", kept); got != handlers.ClaimActive {
				t.Errorf("claim on the side kept (%s) = %q, want active", rp(kept), got)
			}
			e.wantDevice(left, placement.StateAvailable, 1, 1)
			e.wantDevice(kept, placement.StateBurnedInUse, 0, 0)
		})
	}
}

// A broadcast (revert, evacuate, a delete without a host) reaching a host
// that holds no live claim of the instance reads nothing from Placement:
// at 1,000 hosts a read per host per broadcast saturated Placement
// (docs/scale.md). Even an allocation of the instance on this host (a lost
// claim) is left to the periodic scan; the command decides nothing.
func TestBroadcastWithoutClaimReadsNothing(t *testing.T) {
	t.Parallel()
	const inst = "00000000-0000-4000-8000-000000000001"
	for _, tt := range []struct {
		kind  command.Kind
		event string
	}{
		{command.KindRevert, "instance.resize_revert.end"},
		{command.KindRelease, "instance.delete.end"},
		{command.KindReconcile, "instance.evacuate"},
	} {
		t.Run(string(tt.kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, nil)
			e.w.Allocate(inst, true, rp(1)) // held here, but no claim was recorded
			reads := 0
			e.p.InstanceAllocationsF = func(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
				reads++
				return e.w.InstanceAllocations(ctx, instance)
			}
			c := cmd(tt.kind, tt.event, inst)
			c.Scope, c.Host = command.ScopeBroadcast, ""
			e.handle(c)
			if reads != 0 || e.w.Count("scan", "") != 0 || e.w.Count("read", rp(1)) != 0 {
				t.Errorf("Placement reads: allocations %d, scans %d, device reads %d; want none", reads, e.w.Count("scan", ""), e.w.Count("read", rp(1)))
			}
			if n := len(e.c.All()); n != 0 {
				t.Errorf("claims = %d, want none (the broadcast decides nothing here)", n)
			}
			n, err := testutil.GatherAndCount(e.reg, "scour_lifecycle_broadcasts_total")
			mfs, _ := e.reg.Gather()
			got := ""
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					if mf.GetName() == "scour_lifecycle_broadcasts_total" {
						for _, l := range m.GetLabel() {
							got += l.GetName() + "=" + l.GetValue() + ","
						}
						got += fmt.Sprintf(" %v;", m.GetCounter().GetValue())
					}
				}
			}
			if want := fmt.Sprintf("claim=none,kind=%s, 1;", tt.kind); err != nil || n != 1 || got != want {
				t.Errorf("scour_lifecycle_broadcasts_total = %s(err %v), want one series {%s} = 1", got, err, want)
			}
		})
	}
}
