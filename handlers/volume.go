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
// the root volume records "no root volume" (Root "", RootDetached);
// an is_root attach restores it. Applying a change twice is harmless.
func ApplyVolumeChange(v *Volumes, ch command.VolumeChange) {
	switch ch.Action {
	case "attach":
		if !slices.Contains(v.IDs, ch.VolumeID) {
			v.IDs = append(v.IDs, ch.VolumeID)
		}
		if ch.IsRoot {
			v.Root, v.RootDetached = ch.VolumeID, false
		}
	case "detach":
		v.IDs = slices.DeleteFunc(v.IDs, func(id string) bool { return id == ch.VolumeID })
		if ch.IsRoot || (v.Root != "" && v.Root == ch.VolumeID) {
			v.Root, v.RootDetached = "", true
		}
	case "swap":
		i := slices.Index(v.IDs, ch.OldVolumeID)
		switch {
		case slices.Contains(v.IDs, ch.NewVolumeID): // a replay: already swapped
			v.IDs = slices.DeleteFunc(v.IDs, func(id string) bool { return id == ch.OldVolumeID })
		case i >= 0:
			v.IDs[i] = ch.NewVolumeID
		default:
			v.IDs = append(v.IDs, ch.NewVolumeID)
		}
		if v.Root != "" && v.Root == ch.OldVolumeID {
			v.Root = ch.NewVolumeID
		}
	}
}
