package handlers_test

import (
	"slices"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

func TestApplyVolumeChange(t *testing.T) {
	t.Parallel()
	root, data := handlers.Volume{ID: "10000000-0000-4000-8000-000000000001", IsRoot: true}, handlers.Volume{ID: "10000000-0000-4000-8000-000000000003"}
	vols := func(detached bool, v ...handlers.Volume) handlers.Volumes {
		return handlers.Volumes{Attached: v, RootDetached: detached}
	}
	tests := []struct {
		name string
		ch   []command.VolumeChange
		want handlers.Volumes
	}{
		{"attach", []command.VolumeChange{{Action: "attach", VolumeID: "v2"}},
			vols(false, root, data, handlers.Volume{ID: "v2"})},
		{"attach twice", []command.VolumeChange{{Action: "attach", VolumeID: "v2"}, {Action: "attach", VolumeID: "v2"}},
			vols(false, root, data, handlers.Volume{ID: "v2"})},
		{"detach data", []command.VolumeChange{{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000003"}}, vols(false, root)},
		{"detach root", []command.VolumeChange{{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}}, vols(true, data)},
		{"detach root known only from the claim", []command.VolumeChange{{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001"}}, vols(true, data)},
		{"detach root twice", []command.VolumeChange{{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true},
			{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}}, vols(true, data)},
		{"root detached then re-attached", []command.VolumeChange{
			{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}, {Action: "attach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}},
			vols(false, data, root)},
		{"root detached then a new root attached", []command.VolumeChange{
			{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}, {Action: "attach", VolumeID: "10000000-0000-4000-8000-000000000002", IsRoot: true}},
			vols(false, data, handlers.Volume{ID: "10000000-0000-4000-8000-000000000002", IsRoot: true})},
		{"swap root", []command.VolumeChange{{Action: "swap", OldVolumeID: "10000000-0000-4000-8000-000000000001", NewVolumeID: "10000000-0000-4000-8000-000000000002"}},
			vols(false, handlers.Volume{ID: "10000000-0000-4000-8000-000000000002", IsRoot: true}, data)},
		{"swap replayed", []command.VolumeChange{{Action: "swap", OldVolumeID: "10000000-0000-4000-8000-000000000003", NewVolumeID: "d2"},
			{Action: "swap", OldVolumeID: "10000000-0000-4000-8000-000000000003", NewVolumeID: "d2"}},
			vols(false, root, handlers.Volume{ID: "d2"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := vols(false, root, data)
			for _, ch := range tt.ch {
				handlers.ApplyVolumeChange(&v, ch)
			}
			if !slices.Equal(v.Attached, tt.want.Attached) || v.RootDetached != tt.want.RootDetached {
				t.Errorf("got %+v, want %+v", v, tt.want)
			}
		})
	}
}

// Volume commands update the stored claim and never clean anything.
func TestVolumeCommandsUpdateClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("00000000-0000-4000-8000-000000000001", true, rp(1))
	create := cmd(command.KindClaim, "instance.create.end", "00000000-0000-4000-8000-000000000001")
	create.Volumes = []string{"10000000-0000-4000-8000-000000000001"}
	e.handle(create)
	vol := func(state string, ch command.VolumeChange) *command.Command {
		c := cmd(command.KindVolume, "instance.volume_"+ch.Action+".end", "00000000-0000-4000-8000-000000000001")
		c.State, c.Volume = state, &ch
		return c
	}
	e.handle(vol("active", command.VolumeChange{Action: "attach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}))
	e.handle(vol("stopped", command.VolumeChange{Action: "detach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}))
	c, _ := e.c.ForDevice("00000000-0000-4000-8000-000000000001", rp(1))
	if !c.Volumes.RootDetached || len(c.Volumes.Attached) != 0 {
		t.Fatalf("after root detach while stopped: %+v, want no root volume", c.Volumes)
	}
	e.handle(vol("stopped", command.VolumeChange{Action: "attach", VolumeID: "10000000-0000-4000-8000-000000000001", IsRoot: true}))
	c, _ = e.c.ForDevice("00000000-0000-4000-8000-000000000001", rp(1))
	if c.Volumes.RootDetached || !slices.Equal(c.Volumes.Attached, []handlers.Volume{{ID: "10000000-0000-4000-8000-000000000001", IsRoot: true}}) {
		t.Errorf("after is_root re-attach: %+v, want root restored", c.Volumes)
	}
	if n := len(e.cl.Calls()); n != 0 {
		t.Errorf("cleaning runs = %d, want 0", n)
	}
	err := e.h.Handle(t.Context(), vol("active", command.VolumeChange{Action: "explode"}))
	if !handlers.IsPermanent(err) {
		t.Errorf("unknown volume action: err = %v, want permanent", err)
	}
}
