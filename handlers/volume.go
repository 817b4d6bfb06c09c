package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/scour-project/scour/command"
)

// rootDetachStates are the instance states in which Nova lets a boot
// volume be detached (stopped, shelved offloaded).
var rootDetachStates = []string{"stopped", "shelved_offloaded", "shelved"}

// volume keeps the claims' view of the instance's volumes current. It
// never cleans: volumes are not one-time-use devices.
func (h *Handler) volume(ctx context.Context, log *slog.Logger, c *command.Command) error {
	ch := *c.Volume
	switch ch.Action {
	case "attach", "detach", "swap":
	default:
		return fmt.Errorf("%w: instance %s: unknown volume action %q in message %s", ErrPermanent, c.InstanceUUID, ch.Action, c.MessageID)
	}
	if ch.Action == "detach" && ch.IsRoot && !slices.Contains(rootDetachStates, c.State) {
		log.Warn("root volume detached in an unexpected instance state; recording it anyway", "state", c.State, "volume", ch.VolumeID)
	}
	err := h.c.UpdateVolumes(ctx, c.InstanceUUID, func(v *Volumes) { ApplyVolumeChange(v, ch) })
	if err != nil {
		return fmt.Errorf("instance %s: update claim volumes (%s %s): %w (retried; check the claims database)", c.InstanceUUID, ch.Action, ch.VolumeID, err)
	}
	log.Info("claim volumes updated", "action", ch.Action, "volume", ch.VolumeID, "is_root", ch.IsRoot)
	return nil
}

// ApplyVolumeChange updates v for one attach, detach or swap. Detaching
// the root volume records "no root volume" (RootDetached); an is_root
// attach restores it. Applying a change twice is harmless.
func ApplyVolumeChange(v *Volumes, ch command.VolumeChange) {
	find := func(id string) int { return slices.IndexFunc(v.Attached, func(x Volume) bool { return x.ID == id }) }
	switch ch.Action {
	case "attach":
		i := find(ch.VolumeID)
		if i < 0 {
			v.Attached = append(v.Attached, Volume{ID: ch.VolumeID})
			i = len(v.Attached) - 1
		}
		if ch.IsRoot {
			for j := range v.Attached {
				v.Attached[j].IsRoot = j == i
			}
			v.RootDetached = false
		}
	case "detach":
		i := find(ch.VolumeID)
		if ch.IsRoot || (i >= 0 && v.Attached[i].IsRoot) {
			v.RootDetached = true
		}
		if i >= 0 {
			v.Attached = slices.Delete(v.Attached, i, i+1)
		}
	case "swap":
		i, n := find(ch.OldVolumeID), find(ch.NewVolumeID)
		switch {
		case n >= 0 && i >= 0: // a replay: already swapped
			v.Attached[n].IsRoot = v.Attached[n].IsRoot || v.Attached[i].IsRoot
			v.Attached = slices.Delete(v.Attached, i, i+1)
		case i >= 0:
			v.Attached[i].ID = ch.NewVolumeID
		case n < 0:
			v.Attached = append(v.Attached, Volume{ID: ch.NewVolumeID})
		}
	}
}
