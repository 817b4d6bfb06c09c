package app

// Adapters from the real packages to the small interfaces the handlers and
// the pipeline declare. They translate types and error identities, with
// two deliberate checks that join two packages' knowledge and so live
// here: dirtyCheck (the pipeline's pre-destructive test reads Placement)
// and the cleaner's refusal of a device the claims store holds
// quarantined.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// placementGate implements handlers.Placement over placement.Client. It
// remembers every device read in seen, for dirtyCheck and Unreserve, and
// journals each un-reserve PUT with its run in the claims store (journal).
type placementGate struct {
	c       *placement.Client
	seen    *seenDevices
	journal func(runID string) placement.PutJournal
}

var _ handlers.Placement = placementGate{}

func toHandlerDevice(d placement.Device) handlers.Device {
	return handlers.Device{
		RPUUID: d.UUID, RPName: d.Name, Address: d.Address,
		ResourceClass: d.Inventory.ResourceClass,
		Total:         d.Inventory.Total, Reserved: d.Inventory.Reserved,
		Allocated:   d.Used > 0 || len(d.Consumers) > 0,
		Consumers:   slices.Clone(d.Consumers),
		Quarantined: d.Quarantined,
		Cyborg:      d.Cyborg,
		State:       handlers.DeviceState(d.State),
	}
}

func ref(d handlers.Device) placement.Ref {
	return placement.Ref{UUID: d.RPUUID, Name: d.RPName, Address: d.Address}
}

// gateErr gives placement's error identities their handlers names, and
// marks as permanent what retrying cannot fix.
func gateErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, placement.ErrAllocated):
		return fmt.Errorf("%w: %w", handlers.ErrAllocated, err)
	case errors.Is(err, placement.ErrNotAllocated):
		return fmt.Errorf("%w: %w", handlers.ErrNotAllocated, err)
	case errors.Is(err, placement.ErrUnmanaged):
		return fmt.Errorf("%w: %w", handlers.ErrUnmanaged, err)
	case errors.Is(err, placement.ErrQuarantined):
		return fmt.Errorf("%w: %w", handlers.ErrQuarantined, err)
	case errors.Is(err, placement.ErrUnreservedElsewhere):
		return fmt.Errorf("%w: %w", handlers.ErrUnreservedElsewhere, err)
	case errors.Is(err, placement.ErrStaleReturn):
		return fmt.Errorf("%w: %w", handlers.ErrStaleReturn, err)
	case errors.Is(err, claims.ErrNotCleaned):
		// The PUT journal refused: the run is no longer waiting for its
		// return, and nothing was sent.
		return fmt.Errorf("%w: %w", handlers.ErrRunClosed, err)
	case placement.IsRecoverable(err):
		return err
	}
	var api *placement.APIError
	if errors.As(err, &api) && api.Status >= 400 && api.Status < 500 && api.Status != 409 {
		return fmt.Errorf("%w: %w", handlers.ErrPermanent, err)
	}
	return err
}

func (g placementGate) ScanHost(ctx context.Context) ([]handlers.Device, error) {
	res, err := g.c.Scan(ctx)
	if err != nil {
		return nil, gateErr(err)
	}
	out := make([]handlers.Device, 0, len(res.Devices))
	for _, d := range res.Devices {
		g.seen.put(d)
		out = append(out, toHandlerDevice(d))
	}
	return out, nil
}

func (g placementGate) InstanceAllocations(ctx context.Context, instance string) (handlers.InstanceAllocation, error) {
	ic, err := g.c.InstanceDevices(ctx, instance)
	if err != nil {
		return handlers.InstanceAllocation{}, gateErr(err)
	}
	out := handlers.InstanceAllocation{
		VCPU: ic.Compute["VCPU"], MemoryMB: ic.Compute["MEMORY_MB"], DiskGB: ic.Compute["DISK_GB"],
		ProjectID: ic.ProjectID, UserID: ic.UserID, ConsumerType: ic.ConsumerType,
	}
	for _, d := range ic.Devices {
		// InstanceDevices gives only the reference and the usage: read the
		// inventory too, so the handler burns only what Nova left unburned
		// (and its log line and burns_total count only real burns). On a
		// failed read the device keeps Total 0 and is burned anyway:
		// Burn is idempotent, so the read is never needed for safety.
		if full, err := g.c.Device(ctx, d.Ref); err == nil && full.Inventory.Total > 0 {
			d = full
		}
		out.Devices = append(out.Devices, toHandlerDevice(d))
	}
	return out, nil
}

// ReadDevice reads inventory and allocations (2 calls); the traits wait
// for the pipeline's check before the first destructive step, which
// confirms this read with one listing shared by the devices checked
// together (placement.Client.ConfirmShared).
func (g placementGate) ReadDevice(ctx context.Context, d handlers.Device) (handlers.Device, error) {
	read, err := g.c.ReadDevice(ctx, ref(d))
	if errors.Is(err, placement.ErrNotFound) {
		return d, fmt.Errorf("%w: %w", handlers.ErrGone, err)
	}
	if err != nil {
		return d, gateErr(err)
	}
	g.seen.put(read)
	return toHandlerDevice(read), nil
}

func (g placementGate) Burn(ctx context.Context, d handlers.Device) error {
	return gateErr(g.c.Burn(ctx, ref(d)))
}

func (g placementGate) Refence(ctx context.Context, d handlers.Device) error {
	return gateErr(g.c.Refence(ctx, ref(d)))
}

// Unreserve writes at the generation of the device's latest read (the
// pipeline's check before its destructive step); Placement refuses it if
// anything changed since, and the client then re-reads and re-verifies.
// Each PUT is journaled with run runID first, so a scourd that stops
// before recording the answer can tell later whether the device may have
// been in the pool since (placement.PutJournal).
func (g placementGate) Unreserve(ctx context.Context, d handlers.Device, runID string) error {
	var j placement.PutJournal
	if runID != "" && g.journal != nil {
		j = g.journal(runID)
	}
	if seen, ok := g.seen.take(d.RPUUID); ok {
		return gateErr(g.c.UnreserveSeen(ctx, seen, j))
	}
	return gateErr(g.c.Unreserve(ctx, ref(d), j))
}

func (g placementGate) Quarantine(ctx context.Context, d handlers.Device, reason string) error {
	g.seen.take(d.RPUUID)
	return gateErr(g.c.Quarantine(ctx, ref(d), reason))
}

// dirtyCheck is the pipeline's check immediately before a destructive
// step (safety rule 2). It reads the device afresh and reports "in use"
// unless Placement shows it exactly dirty: no allocation, no usage, and
// still fully reserved (so a device someone un-reserved meanwhile, which
// Nova could hand out at any moment, is not wiped either), and not
// quarantined. An earlier read of the device (seen) is confirmed while
// the device's generation has not moved, by one listing shared with every
// device checked at the same moment (placement.Client.ConfirmShared), or
// else read afresh. Either way the answer is Placement's state now.
type dirtyCheck struct {
	c    *placement.Client
	seen *seenDevices
}

var _ pipeline.AllocationChecker = dirtyCheck{}

func (a dirtyCheck) HasAllocations(ctx context.Context, rpUUID string) (bool, error) {
	var d placement.Device
	var err error
	if seen, ok := a.seen.get(rpUUID); ok {
		d, err = a.c.ConfirmShared(ctx, seen)
	} else {
		d, err = a.c.Device(ctx, placement.Ref{UUID: rpUUID, Name: rpUUID})
	}
	if err != nil {
		return false, err
	}
	a.seen.put(d)
	inv := d.Inventory
	dirty := d.Used == 0 && len(d.Consumers) == 0 && inv.Total > 0 && inv.Reserved >= inv.Total && !d.Quarantined
	return !dirty, nil
}

var _ pipeline.RetiredChecker = dirtyCheck{}

// HasAllocationsRetired is the check before an operator's retirement
// wipe: the device must be reserved, quarantined (retired) and free.
func (a dirtyCheck) HasAllocationsRetired(ctx context.Context, rpUUID string) (bool, error) {
	d, err := a.c.Device(ctx, placement.Ref{UUID: rpUUID, Name: rpUUID})
	if err != nil {
		return false, err
	}
	a.seen.put(d)
	inv := d.Inventory
	retired := d.Used == 0 && len(d.Consumers) == 0 && inv.Total > 0 && inv.Reserved >= inv.Total && d.Quarantined
	return !retired, nil
}

// presence implements handlers.Hardware: a device is cleaned only when
// this host's hardware discovery finds it (safety rule 3).
type presence struct{ be hardware.Backend }

func (p presence) Present(ctx context.Context, addr hardware.Address) (bool, error) {
	addrs, err := p.be.List(ctx)
	if err != nil {
		return false, fmt.Errorf("hardware discovery: %w", err)
	}
	return slices.Contains(addrs, addr), nil
}

// recordTrigger is a cleaning record's triggered_by for what made the
// reconciler queue the device (handlers.CleanRequest.Trigger): the
// notification, release, operator command or scan, never a fixed text.
func recordTrigger(reason string) string {
	switch reason {
	case "":
		return "scourd reconciler"
	case "start":
		return "scourd reconciler: scan at scourd start"
	case "interval":
		return "scourd reconciler: periodic scan"
	case "follow-up":
		return "scourd reconciler: follow-up scan after a triggered one"
	}
	return "scourd reconciler: " + reason
}

// records is what the cleaner needs of the claims store besides the
// engine's checkpoints: quarantines, and closing cleaned records.
type records interface {
	ActiveQuarantine(ctx context.Context, host, deviceRP string) (claims.Quarantine, bool, error)
	MarkReturned(ctx context.Context, runID, note string) error
	NoteReturnPending(ctx context.Context, runID, why string) error
	CloseCleaned(ctx context.Context, runID, why string) error
}

// cleaner implements handlers.Cleaner over the pipeline engine. The engine
// stores every step and seals the record (claims store) before it returns
// a clean verdict, so the un-reserve that follows comes after the record.
//
// A device the claims store holds quarantined is never cleaned, whatever
// Placement shows: if its trait was lost (a failed write, a crash after
// the verdict, an agent rewriting the provider's traits), the verdict is
// quarantine again and the handlers put the trait back. Only an operator's
// release (scourctl placement unquarantine) ends a quarantine (rule 4).
type cleaner struct {
	e    *pipeline.Engine
	q    records
	host string
}

var _ handlers.ReturnRecorder = cleaner{}

func (c cleaner) RecordReturned(ctx context.Context, runID string, d handlers.Device) error {
	return c.q.MarkReturned(ctx, runID, fmt.Sprintf("every required step succeeded; device %s un-reserved in Placement", d.Address))
}

func (c cleaner) RecordNotReturned(ctx context.Context, runID string, _ handlers.Device, why string, final bool) error {
	if final {
		return c.q.CloseCleaned(ctx, runID, why)
	}
	return c.q.NoteReturnPending(ctx, runID, why)
}

func (c cleaner) Clean(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
	q, quarantined, err := c.q.ActiveQuarantine(ctx, c.host, req.Device.RPUUID)
	if err != nil {
		return handlers.CleanResult{}, err
	}
	target := pipeline.Target{
		Address: req.Device.Address, RPUUID: req.Device.RPUUID, RPName: req.Device.RPName,
		ResourceClass:    req.Device.ResourceClass,
		PreviousInstance: req.PreviousInstance, PreviousProject: req.PreviousProject,
		Trigger: recordTrigger(req.Trigger),
	}
	if quarantined && q.Wipe != "" {
		// An operator's retirement of a device not cleaned since its last
		// tenant: its retirement run, not the pipeline.
		res, err := c.e.Retire(ctx, target, q.Reason, q.Wipe == claims.WipeDeclined)
		if err != nil {
			return handlers.CleanResult{}, err
		}
		return handlers.CleanResult{Verdict: handlers.Verdict(res.Verdict), RunID: res.RunID, Detail: res.String()}, nil
	}
	if quarantined {
		return handlers.CleanResult{Verdict: handlers.VerdictQuarantine, RunID: q.RunID,
			Detail: fmt.Sprintf("device %s was quarantined at %s by run %s (%s) and never released; its Placement trait was missing and is set again; release it with scourctl placement unquarantine once the cause is fixed",
				req.Device.Address, q.QuarantinedAt.Format(time.RFC3339), q.RunID, q.Reason)}, nil
	}
	res, err := c.e.Clean(ctx, target)
	if err != nil {
		return handlers.CleanResult{}, err
	}
	return handlers.CleanResult{Verdict: handlers.Verdict(res.Verdict), RunID: res.RunID, Detail: res.String()}, nil
}
