package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/command"
)

// claim handles create, unshelve, resize_finish (dest),
// live_migration_post_dest and rebuild: the instance's allocations say
// which devices of this host it holds; each gets a claim, and any that
// Nova left unburned is burned first. A late claim command for an instance
// that holds nothing here any more records nothing and burns nothing.
func (h *Handler) claim(ctx context.Context, log *slog.Logger, c *command.Command) error {
	alloc, err := h.p.InstanceAllocations(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read allocations from Placement: %w (retried; check Placement is reachable)", c.InstanceUUID, err)
	}
	if len(alloc.Devices) == 0 {
		log.Debug("instance holds no one-time-use device of this host; nothing to claim")
		return nil
	}
	existing, err := h.c.ClaimsForInstance(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read claims: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	return h.record(ctx, log, c, alloc, existing)
}

// record burns and claims alloc's devices, carrying volume knowledge from
// the instance's previous claims (a dormant claim on unshelve), then
// releases dormant claims the new ones supersede.
func (h *Handler) record(ctx context.Context, log *slog.Logger, c *command.Command, alloc InstanceAllocation, existing []Claim) error {
	vols := carryVolumes(existing, c.Volumes)
	resizeTarget := strings.Contains(c.EventType, "resize_finish") && hasOtherOpenClaim(existing, alloc.Devices)
	var errs []error
	claimed := map[string]bool{}
	for _, d := range alloc.Devices {
		dlog := log.With("device", d.RPName, "rp", d.RPUUID, "address", d.Address)
		if !burned(d) {
			err := h.p.Burn(ctx, d)
			if errors.Is(err, ErrNotAllocated) {
				dlog.Info("device freed before it could be burned; left to the reconciler")
				continue
			}
			if err != nil {
				h.m.burns.WithLabelValues("error").Inc()
				errs = append(errs, fmt.Errorf("instance %s device %s: burn (reserved=total): %w (retried; until it succeeds the device would return to the pool uncleaned when the instance goes)", c.InstanceUUID, d.RPName, err))
				continue
			}
			h.m.burns.WithLabelValues("ok").Inc()
			dlog.Info("burned device Nova left unburned")
		}
		cl := Claim{Host: h.cfg.Host, Node: h.cfg.Node, InstanceUUID: c.InstanceUUID,
			ProjectID: cmp.Or(alloc.ProjectID, c.ProjectID), UserID: cmp.Or(alloc.UserID, c.UserID), DeviceRP: d.RPUUID, Address: d.Address, ResourceClass: d.ResourceClass,
			VCPU: alloc.VCPU, MemoryMB: alloc.MemoryMB, DiskGB: alloc.DiskGB, ResizeTarget: resizeTarget,
			State: ClaimActive, Volumes: vols, MessageID: c.MessageID, CreatedAt: h.now(), UpdatedAt: h.now()}
		if err := h.c.RecordClaim(ctx, cl); err != nil {
			errs = append(errs, fmt.Errorf("instance %s device %s: record claim: %w (retried; check the claims database)", c.InstanceUUID, d.RPName, err))
			continue
		}
		claimed[d.RPUUID] = true
		dlog.Info("claim recorded")
	}
	for _, old := range existing {
		if old.State != ClaimDormant || claimed[old.DeviceRP] {
			continue
		}
		if err := h.c.SetClaimState(ctx, old.ID, ClaimReleased, "superseded by "+c.EventType); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: release dormant claim %s: %w (retried)", c.InstanceUUID, old.ID, err))
		}
	}
	return errors.Join(errs...)
}

// carryVolumes keeps what scour learnt from volume events (root detached)
// across claims; the command's block device list, when present, is newer.
func carryVolumes(existing []Claim, fromCommand []string) Volumes {
	var v Volumes
	var newest time.Time
	for _, c := range existing {
		if (c.State == ClaimActive || c.State == ClaimDormant) && !c.UpdatedAt.Before(newest) {
			v, newest = c.Volumes, c.UpdatedAt
		}
	}
	if len(fromCommand) > 0 {
		v.IDs = slices.Clone(fromCommand)
	}
	v.IDs = slices.Clone(v.IDs)
	return v
}

func hasOtherOpenClaim(existing []Claim, devs []Device) bool {
	for _, c := range existing {
		if c.State == ClaimActive && !slices.ContainsFunc(devs, func(d Device) bool { return d.RPUUID == c.DeviceRP }) {
			return true
		}
	}
	return false
}

// burned: the device is known to be fully reserved already.
func burned(d Device) bool { return d.Total > 0 && d.Reserved >= d.Total }
