package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/placement"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/command"
)

// claim handles create, unshelve, resize_finish (dest),
// live_migration_post_dest and rebuild: the instance's allocations say
// which devices of this host it holds; any that Nova left unburned is
// burned, and the instance's claim records them. A late claim command for
// an instance that holds nothing here any more records and burns nothing.
func (h *Handler) claim(ctx context.Context, log *slog.Logger, c *command.Command) error {
	began := h.now()
	alloc, err := h.p.InstanceAllocations(ctx, c.InstanceUUID)
	// Dated by the request's start: the read showed the instance holding
	// a device before its delete freed it, and so before any run that
	// cleans it began; the answer may come after such a run began
	// (e2e TestKeystoneDownMidRun: dated by the answer, the run refused
	// its own un-reserve). A tenant that came during a run behind a
	// lifted fence moved the generation, which the run's un-reserve
	// refuses anyway (ErrStaleReturn).
	alloc.ReadAt = began
	if err != nil {
		return fmt.Errorf("instance %s: read allocations from Placement: %w (retried; check Placement is reachable)", c.InstanceUUID, err)
	}
	gone, held, err := h.deleted(ctx, log, c)
	if err != nil {
		return err
	}
	if gone {
		// Its delete was handled here already and Placement agrees it
		// holds nothing here: nothing is burned or recorded; a claim this
		// command wrote before a crash is ended and its devices cleaned
		// (deleted.go). Devices the first read showed it holding were
		// freed since (the delete won the race): their holder is
		// recorded, as for a device freed before its burn.
		log.Info("instance's delete already handled on this host: nothing to claim")
		errs := []error{h.endDeleted(ctx, log, c, fmt.Sprintf("%s of deleted instance %s", c.Kind, c.InstanceUUID))}
		for _, d := range alloc.Devices {
			errs = append(errs, h.sawFreedHolder(ctx, log, c, d, alloc.ReadAt))
		}
		if len(alloc.Devices) > 0 {
			h.rec.Trigger(fmt.Sprintf("%s: device(s) of instance %s freed before their burn", c.EventType, c.InstanceUUID))
		}
		return errors.Join(errs...)
	}
	if held != nil {
		alloc = *held // a stale tombstone: Placement's read after it is the newer
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

// record burns alloc's devices, wakes or supersedes a dormant claim
// (unshelve), and records the claim, carrying what volume events taught.
func (h *Handler) record(ctx context.Context, log *slog.Logger, c *command.Command, alloc InstanceAllocation, existing []Claim) error {
	errs := []error{}
	var devs []ClaimDevice
	freed := 0
	for _, d := range alloc.Devices {
		err := h.burn(ctx, log, c, d)
		if errors.Is(err, placement.ErrNotAllocated) {
			// Freed since the allocation read (the instance deleted,
			// its delete maybe handled and scanned already): no claim,
			// but Placement's read showed the instance holding the
			// un-fenced device, and nothing else may ever record it
			// (Nova does not burn it: Cyborg, or Nova before 2025.2).
			// Recorded as its holder, the scan fences it again and
			// cleans it (refence), rather than leave it in the pool.
			errs = append(errs, h.sawFreedHolder(ctx, log, c, d, alloc.ReadAt))
			freed++
			continue
		}
		if errors.Is(err, placement.ErrUnmanaged) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		devs = append(devs, ClaimDevice{RPUUID: d.RPUUID, RPName: d.RPName, Address: d.Address, ResourceClass: d.ResourceClass})
	}
	if err := h.arq.record(ctx, log, c.InstanceUUID, alloc.Devices); err != nil {
		log.Warn("Cyborg ARQ not recorded at bind; the scans retry while the instance holds the card", "error", err)
	}
	if freed > 0 {
		h.rec.Trigger(fmt.Sprintf("%s: device(s) of instance %s freed before their burn", c.EventType, c.InstanceUUID))
	}
	if len(devs) == 0 {
		return errors.Join(errs...)
	}
	vols := carryVolumes(existing, c.Volumes)
	for _, old := range existing {
		if old.State != ClaimDormant {
			continue
		}
		var err error
		if sameDevices(old.Devices, devs) {
			err = h.c.Reactivate(ctx, c.InstanceUUID, c.MessageID)
			h.rec.forgetClaim(old)
		} else {
			err = h.c.ReleaseClaim(ctx, c.InstanceUUID, old.ResizeTarget, "superseded by "+c.EventType, c.MessageID)
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("instance %s: wake or supersede its dormant claim %s: %w (retried; check the claims database)", c.InstanceUUID, old.ID, err))...)
		}
	}
	cl := Claim{Host: h.cfg.Host, Node: h.cfg.Node, InstanceUUID: c.InstanceUUID,
		ProjectID: cmp.Or(alloc.ProjectID, c.ProjectID), UserID: cmp.Or(alloc.UserID, c.UserID),
		VCPU: alloc.VCPU, MemoryMB: alloc.MemoryMB, DiskGB: alloc.DiskGB, Devices: devs,
		ResizeTarget: isResizeFinish(c.EventType) && sourceClaimElsewhere(existing, devs),
		State:        ClaimActive, Volumes: vols, MessageID: c.MessageID, CreatedAt: h.now(), UpdatedAt: h.now()}
	err := h.c.RecordClaim(ctx, cl)
	h.rec.forgetClaim(cl)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("instance %s: record claim of %d device(s): %w (retried; check the claims database)", c.InstanceUUID, len(devs), err))...)
	}
	log.Info("claim recorded", "devices", len(devs), "resize_target", cl.ResizeTarget)
	// The delete may have been handled while this claim was burned and
	// written, after it read no claim: read its tombstone now; the claim
	// is ended only when Placement agrees the instance is gone (deleted.go).
	gone, _, err := h.deleted(ctx, log, c)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if gone {
		errs = append(errs, h.endDeleted(ctx, log, c, fmt.Sprintf("%s of instance %s deleted meanwhile", c.Kind, c.InstanceUUID)))
	}
	return errors.Join(errs...)
}

// sawFreedHolder records instance c as the holder of d, which the
// command's allocation read showed it holding and which was freed before
// the burn: the device's tenant is known, so a scan that finds it
// un-fenced fences it again (refence) and a clean names the instance. A
// tenant write: the re-fence cache's answer goes. A store that cannot
// record it fails the command, which is retried (its allocation read then
// finds nothing, and the scan must do without).
//
// The holder is dated by the allocation read that saw it (readAt; zero:
// now), which came before the device was freed and so before the
// release run that cleans it began: dated at this write, it would look
// like a tenant who came during that run, and the run would not return
// the device it cleaned.
func (h *Handler) sawFreedHolder(ctx context.Context, log *slog.Logger, c *command.Command, d Device, readAt time.Time) error {
	err := h.c.SawHolderAt(ctx, d.RPUUID, c.InstanceUUID, readAt)
	h.rec.forgetTenant(d.RPUUID, d.Address)
	if err != nil {
		return fmt.Errorf("instance %s device %s: record the instance as the holder of the device freed before its burn: %w (retried; until then the device may stay in the pool uncleaned: check the claims database)", c.InstanceUUID, d.RPName, err)
	}
	log.Info("device freed before its burn; its holder recorded, the scan fences it again if its fence is lifted and cleans it", "device", d.RPName, "address", d.Address)
	return nil
}

// burn sets reserved=total when Nova did not (Nova before 2025.2, or a
// device flagged late): until then a delete would return it uncleaned.
func (h *Handler) burn(ctx context.Context, log *slog.Logger, c *command.Command, d Device) error {
	if d.Fenced() {
		return nil
	}
	err := h.p.Burn(ctx, d)
	switch {
	case errors.Is(err, placement.ErrNotAllocated):
		log.Info("device freed before it could be burned; left to the reconciler", "device", d.RPName)
		return err
	case errors.Is(err, placement.ErrUnmanaged):
		log.Warn("device has a shape scour does not manage; not burned, not claimed (check its inventory: one inventory of total 1 expected)", "device", d.RPName, "error", err)
		return err
	case err != nil:
		h.m.burns.WithLabelValues("error").Inc()
		return fmt.Errorf("instance %s device %s: burn (reserved=total): %w (retried; until it succeeds the device would return to the pool uncleaned when the instance goes)", c.InstanceUUID, d.RPName, err)
	}
	h.m.burns.WithLabelValues("ok").Inc()
	log.Info("burned device Nova left unburned", "device", d.RPName, "address", d.Address)
	return nil
}

func isResizeFinish(event string) bool {
	return strings.Contains(event, "resize_finish") || strings.Contains(event, "finish_resize")
}

// sourceClaimElsewhere: the instance already has a non-target active claim
// here that lacks one of devs, so devs are the new side of a same-host
// resize and get their own (ResizeTarget) claim.
func sourceClaimElsewhere(existing []Claim, devs []ClaimDevice) bool {
	for _, c := range existing {
		if c.State == ClaimActive && !c.ResizeTarget &&
			slices.ContainsFunc(devs, func(d ClaimDevice) bool { return !c.HasDevice(d.RPUUID) }) {
			return true
		}
	}
	return false
}

func sameDevices(a, b []ClaimDevice) bool {
	if len(a) != len(b) {
		return false
	}
	for _, d := range b {
		if !slices.ContainsFunc(a, func(x ClaimDevice) bool { return x.RPUUID == d.RPUUID }) {
			return false
		}
	}
	return true
}

// carryVolumes keeps what volume events taught (root detached) from the
// newest live claim; the command's block device list, when present, is the
// newer list of ids.
func carryVolumes(existing []Claim, ids []string) Volumes {
	var v Volumes
	var newest time.Time
	for _, c := range existing {
		if c.Live() && !c.UpdatedAt.Before(newest) {
			v, newest = c.Volumes, c.UpdatedAt
		}
	}
	old := v.Attached
	v.Attached = slices.Clone(old)
	if len(ids) > 0 {
		v.Attached = nil
		for _, id := range ids {
			root := slices.ContainsFunc(old, func(o Volume) bool { return o.ID == id && o.IsRoot })
			v.Attached = append(v.Attached, Volume{ID: id, IsRoot: root})
		}
	}
	return v
}
