package handlers_test

import (
	"slices"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

func TestApplyVolumeChange(t *testing.T) {
	t.Parallel()
	start := handlers.Volumes{IDs: []string{"root", "data"}, Root: "root"}
	tests := []struct {
		name string
		ch   []command.VolumeChange
		want handlers.Volumes
	}{
		{"attach", []command.VolumeChange{{Action: "attach", VolumeID: "v2"}},
			handlers.Volumes{IDs: []string{"root", "data", "v2"}, Root: "root"}},
		{"attach twice", []command.VolumeChange{{Action: "attach", VolumeID: "v2"}, {Action: "attach", VolumeID: "v2"}},
			handlers.Volumes{IDs: []string{"root", "data", "v2"}, Root: "root"}},
		{"detach data", []command.VolumeChange{{Action: "detach", VolumeID: "data"}},
			handlers.Volumes{IDs: []string{"root"}, Root: "root"}},
		{"detach root", []command.VolumeChange{{Action: "detach", VolumeID: "root", IsRoot: true}},
			handlers.Volumes{IDs: []string{"data"}, RootDetached: true}},
		{"detach root known only from the claim", []command.VolumeChange{{Action: "detach", VolumeID: "root"}},
			handlers.Volumes{IDs: []string{"data"}, RootDetached: true}},
		{"root detached then a new root attached", []command.VolumeChange{
			{Action: "detach", VolumeID: "root", IsRoot: true}, {Action: "attach", VolumeID: "root2", IsRoot: true}},
			handlers.Volumes{IDs: []string{"data", "root2"}, Root: "root2"}},
		{"swap root", []command.VolumeChange{{Action: "swap", OldVolumeID: "root", NewVolumeID: "root2"}},
			handlers.Volumes{IDs: []string{"root2", "data"}, Root: "root2"}},
		{"swap replayed", []command.VolumeChange{{Action: "swap", OldVolumeID: "data", NewVolumeID: "d2"},
			{Action: "swap", OldVolumeID: "data", NewVolumeID: "d2"}},
			handlers.Volumes{IDs: []string{"root", "d2"}, Root: "root"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := start
			v.IDs = slices.Clone(start.IDs)
			for _, ch := range tt.ch {
				handlers.ApplyVolumeChange(&v, ch)
			}
			if !slices.Equal(v.IDs, tt.want.IDs) || v.Root != tt.want.Root || v.RootDetached != tt.want.RootDetached {
				t.Errorf("got %+v, want %+v", v, tt.want)
			}
		})
	}
}

// Volume commands update the stored claim and never clean anything.
func TestVolumeCommandsUpdateClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.w.Allocate("vm-1", true, rp(1))
	create := cmd(command.KindClaim, "instance.create.end", "vm-1")
	create.Volumes = []string{"root"}
	e.handle(create)
	vol := func(state string, ch command.VolumeChange) *command.Command {
		c := cmd(command.KindVolume, "instance.volume_"+ch.Action+".end", "vm-1")
		c.State, c.Volume = state, &ch
		return c
	}
	e.handle(vol("active", command.VolumeChange{Action: "attach", VolumeID: "root", IsRoot: true}))
	e.handle(vol("stopped", command.VolumeChange{Action: "detach", VolumeID: "root", IsRoot: true}))
	c, _ := e.c.Get("vm-1", rp(1))
	if !c.Volumes.RootDetached || len(c.Volumes.IDs) != 0 {
		t.Fatalf("after root detach while stopped: %+v, want no root volume", c.Volumes)
	}
	e.handle(vol("stopped", command.VolumeChange{Action: "attach", VolumeID: "root", IsRoot: true}))
	c, _ = e.c.Get("vm-1", rp(1))
	if c.Volumes.RootDetached || c.Volumes.Root != "root" {
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
