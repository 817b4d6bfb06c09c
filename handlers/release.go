package handlers

import (
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/placement"
	"log/slog"
	"slices"
	"sync"

	"github.com/scour-project/scour/command"
)

// release handles delete, shelve_offload, the source side of a finished
// move and the revert broadcast. All four follow one rule: a live claim of
// this host none of whose devices the instance still holds is released
// (for shelve_offload: made dormant); a claim still backed is kept. So a
// forged or early delete for a running instance releases nothing, the
// revert broadcast releases only where the instance left, a same-host
// resize releases just the side it left, and the host keeping the instance
// (revert) re-records its claim. Placement, not the command, decides
// which device is dirty.
//
// With a live claim (the common case) the claim's devices are read one by
// one (2 Placement calls each, several at once), and each is queued for
// cleaning the moment its own read shows it free and dirty, with no scan
// and without waiting for the claim's other devices: a burned,
// unallocated device is correct to clean whatever the rest of the claim
// shows (a scan would queue it too). The claim itself is ended only when
// all its devices are read and none is still held by the instance; the
// consumers say that. Without one, and for a revert (whose
// claim records the instance's allocations), the instance's allocations
// are read; a host-scoped release then scans the host (the claim may have
// been lost, and only the tree says what the instance held), and so does a
// release whose instance still holds devices here (except a resize
// confirm's broadcast on the destination, where that is expected). A
// broadcast (revert, resize confirm, or a delete nova-api sent with no
// host) acts only on hosts that hold a live
// claim of the instance, so one broadcast costs neither a scan nor a
// Placement read on every host; the periodic scan covers a host whose
// claim was never recorded.
func (h *Handler) release(ctx context.Context, log *slog.Logger, c *command.Command) error {
	reason := fmt.Sprintf("%s of instance %s", c.Kind, c.InstanceUUID)
	existing, err := h.c.ClaimsForInstance(ctx, c.InstanceUUID)
	if err != nil {
		if c.Scope == command.ScopeHost {
			h.rec.Trigger(reason)
		}
		return fmt.Errorf("instance %s: read claims: %w (retried; check the claims database)", c.InstanceUUID, err)
	}
	if c.Kind == command.KindRevert || !slices.ContainsFunc(existing, Claim.Live) {
		return h.releaseByAllocations(ctx, log, c, existing, reason)
	}
	mark := h.rec.mark()
	read, queued, err := h.readClaimed(ctx, existing, func(d Device) {
		h.rec.queueRead(ctx, []Device{d}, mark, reason)
	})
	if err != nil {
		return fmt.Errorf("instance %s: %w (retried; check Placement is reachable)", c.InstanceUUID, err)
	}
	held := map[string]bool{}
	for rp, d := range read {
		held[rp] = d.HeldBy(c.InstanceUUID)
	}
	// The freed devices not queued already are queued before their claims
	// are ended: the cleaning does not wait for the claims database, and a
	// failed claim write (the command is retried) does not hold a dirty
	// device back.
	var ended []Claim
	var freed []Device
	scan, kept := false, false
	for _, cl := range existing {
		if !cl.Live() {
			continue
		}
		if backedBy(cl, held) {
			kept = true
			if c.Kind == command.KindMoveSource && c.Scope == command.ScopeBroadcast {
				// A resize confirm is a broadcast (a cross-cell one comes
				// from nova-conductor): it also reaches the destination,
				// whose claim the instance holds. Nothing is wrong there.
				log.Debug("instance runs on this host's devices of the claim (move destination); claim kept", "claim", cl.ID)
				continue
			}
			scan = true
			log.Warn("instance still holds one-time-use devices of this host; their claim is kept and nothing is cleaned (early, duplicate or forged notification?)",
				"claim", cl.ID)
			continue
		}
		ended = append(ended, cl)
		for _, d := range cl.Devices {
			if dev, ok := read[d.RPUUID]; ok && !queued[d.RPUUID] {
				freed = append(freed, dev)
			}
		}
	}
	if h.rec.queueRead(ctx, freed, mark, reason) || scan {
		h.rec.Trigger(reason)
	}
	var errs []error
	for _, cl := range ended {
		errs = append(errs, h.end(ctx, log, c, cl))
	}
	if !kept && errors.Join(errs...) == nil {
		errs = append(errs, h.noteDeleted(ctx, log, c, reason))
	}
	return errors.Join(errs...)
}

// readClaimed reads every device of the live claims, and hands each device
// whose own read shows it dirty (fully reserved, unallocated, managed) to
// free at once: a release's latency to its first cleaning run is one
// device's read, not the claim's. The first device is read alone, the
// others then readParallel at a time: with all of them in flight, a
// Placement that serves requests one at a time answers them in no useful
// order, and the first device was complete only after most of the others. It returns every device read, and which went to free.
// Devices gone from the tree are left out (nobody holds them here).
func (h *Handler) readClaimed(ctx context.Context, claims []Claim, free func(Device)) (read map[string]Device, queued map[string]bool, err error) {
	var want []ClaimDevice
	seen := map[string]bool{}
	for _, cl := range claims {
		for _, d := range cl.Devices {
			if cl.Live() && !seen[d.RPUUID] {
				seen[d.RPUUID] = true
				want = append(want, d)
			}
		}
	}
	devs := make([]Device, len(want))
	errs := make([]error, len(want))
	sem := make(chan struct{}, readParallel)
	first := make(chan struct{})
	var wg sync.WaitGroup
	for i, d := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if i == 0 {
				defer close(first)
			}
			devs[i], errs[i] = h.p.ReadDevice(ctx, Device{RPUUID: d.RPUUID, RPName: d.RPName, Address: d.Address, ResourceClass: d.ResourceClass})
			switch {
			case errs[i] == nil && devs[i].Dirty():
				free(devs[i])
			case errs[i] != nil && !errors.Is(errs[i], placement.ErrNotFound):
				errs[i] = fmt.Errorf("read device %s from Placement before releasing claims: %w", d.RPName, errs[i])
			}
		}()
		if i == 0 {
			<-first
		}
	}
	wg.Wait()
	read, queued = map[string]Device{}, map[string]bool{}
	var failed []error
	for i, d := range want {
		switch {
		case errors.Is(errs[i], placement.ErrNotFound):
		case errs[i] != nil:
			failed = append(failed, errs[i])
		default:
			read[d.RPUUID] = devs[i]
			queued[d.RPUUID] = devs[i].Dirty()
		}
	}
	return read, queued, errors.Join(failed...)
}

// readParallel bounds one release's concurrent device reads (Placement's
// default deployment serves a handful of requests at once per process).
const readParallel = 8

// releaseByAllocations is release for an instance without a live claim
// here, and for a revert: Placement's allocations of the instance say what
// it still holds.
//
// A broadcast reaching a host with no live claim of the instance stops
// here, without reading Placement (ignoredBroadcast).
func (h *Handler) releaseByAllocations(ctx context.Context, log *slog.Logger, c *command.Command, existing []Claim, reason string) error {
	if h.ignoredBroadcast(log, c, existing) {
		return nil
	}
	scan := c.Scope == command.ScopeHost
	var freed []Device
	defer func() {
		if len(freed) > 0 && h.rec.CheckDevices(ctx, freed, reason) {
			scan = true
		}
		if scan {
			h.rec.Trigger(reason)
		}
	}()
	alloc, err := h.p.InstanceAllocations(ctx, c.InstanceUUID)
	if err != nil {
		return fmt.Errorf("instance %s: read allocations from Placement before releasing claims: %w (retried; check Placement is reachable)", c.InstanceUUID, err)
	}
	held := map[string]bool{}
	for _, d := range alloc.Devices {
		held[d.RPUUID] = true
	}
	var errs []error
	for _, cl := range existing {
		if !cl.Live() {
			continue
		}
		scan = false // the claim says what the instance held here
		if backedBy(cl, held) {
			continue
		}
		errs = append(errs, h.end(ctx, log, c, cl))
		for _, d := range cl.Devices {
			freed = append(freed, Device{RPUUID: d.RPUUID, RPName: d.RPName, Address: d.Address, ResourceClass: d.ResourceClass})
		}
	}
	if len(alloc.Devices) > 0 {
		scan = true
		if c.Kind == command.KindRevert {
			errs = append(errs, h.record(ctx, log, c, alloc, existing))
		} else {
			log.Warn("instance still holds one-time-use devices of this host; their claim is kept and nothing is cleaned (early, duplicate or forged notification?)",
				"devices", len(alloc.Devices))
		}
	} else if errors.Join(errs...) == nil {
		errs = append(errs, h.noteDeleted(ctx, log, c, reason))
	}
	return errors.Join(errs...)
}

// end releases one unbacked live claim, or makes it dormant on shelve
// offload.
func (h *Handler) end(ctx context.Context, log *slog.Logger, c *command.Command, cl Claim) error {
	if c.Kind == command.KindShelveOffload {
		if cl.State == ClaimDormant {
			return nil
		}
		if err := h.c.MarkDormant(ctx, c.InstanceUUID, c.MessageID); err != nil {
			return fmt.Errorf("instance %s: keep claim %s dormant for the unshelve: %w (retried; check the claims database)", c.InstanceUUID, cl.ID, err)
		}
		log.Info("claim dormant until unshelve", "claim", cl.ID)
		return nil
	}
	if err := h.c.ReleaseClaim(ctx, c.InstanceUUID, cl.ResizeTarget, c.EventType, c.MessageID); err != nil {
		return fmt.Errorf("instance %s: release claim %s: %w (retried; check the claims database)", c.InstanceUUID, cl.ID, err)
	}
	log.Info("claim released", "claim", cl.ID, "resize_target", cl.ResizeTarget)
	return nil
}

func backedBy(cl Claim, held map[string]bool) bool {
	for _, d := range cl.Devices {
		if held[d.RPUUID] {
			return true
		}
	}
	return false
}
