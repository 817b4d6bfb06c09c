package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
)

// Engine is what the Cleaner runs: the pipeline engine.
type Engine interface {
	Clean(ctx context.Context, t pipeline.Target) (*pipeline.Result, error)
	Retire(ctx context.Context, t pipeline.Target, reason string, declined bool) (*pipeline.Result, error)
}

// Records is what the EngineCleaner needs of the claims store besides the
// engine's checkpoints: quarantines, and closing cleaned records.
type Records interface {
	ActiveQuarantine(ctx context.Context, host, deviceRP string) (claims.Quarantine, bool, error)
	MarkReturned(ctx context.Context, runID, note string) error
	NoteReturnPending(ctx context.Context, runID, why string) error
	CloseCleaned(ctx context.Context, runID, why string) error
	CloseCleanedUsed(ctx context.Context, runID, why string) error
	UsedSinceStarted(ctx context.Context, runID string) (string, error)
}

// EngineCleaner is the Cleaner over the pipeline engine. The engine stores
// every step and seals the record (claims store) before it returns a
// clean verdict, so the un-reserve that follows comes after the record
// (rule 1).
//
// A device the claims store holds quarantined is never cleaned, whatever
// Placement shows (rule 4): if its trait was lost (a failed write, a crash
// after the verdict, an agent rewriting the provider's traits), the
// verdict is quarantine again and the handlers put the trait back. Only an
// operator's release (scourctl placement unquarantine) ends a quarantine.
// The store's open quarantines are the handlers' to read (quarantines.go):
// this refusal is the same authority, asked per device.
type EngineCleaner struct {
	Engine  Engine
	Records Records
	Host    string
}

var (
	_ Cleaner        = EngineCleaner{}
	_ ReturnRecorder = EngineCleaner{}
)

func (c EngineCleaner) RecordReturned(ctx context.Context, runID string, d Device) error {
	return c.Records.MarkReturned(ctx, runID, fmt.Sprintf("every required step succeeded; device %s un-reserved in Placement", d.Address))
}

func (c EngineCleaner) RecordNotReturned(ctx context.Context, runID string, _ Device, why string, final bool) error {
	if final {
		return c.Records.CloseCleaned(ctx, runID, why)
	}
	return c.Records.NoteReturnPending(ctx, runID, why)
}

func (c EngineCleaner) RecordUsedAfterClean(ctx context.Context, runID string, _ Device, why string) error {
	return c.Records.CloseCleanedUsed(ctx, runID, why)
}

func (c EngineCleaner) UsedSinceStarted(ctx context.Context, runID string) (string, error) {
	return c.Records.UsedSinceStarted(ctx, runID)
}

func (c EngineCleaner) Clean(ctx context.Context, req CleanRequest) (CleanResult, error) {
	q, quarantined, err := c.Records.ActiveQuarantine(ctx, c.Host, req.Device.RPUUID)
	if err != nil {
		return CleanResult{}, err
	}
	target := pipeline.Target{
		Address: req.Device.Address, RPUUID: req.Device.RPUUID, RPName: req.Device.RPName,
		ResourceClass:    req.Device.ResourceClass,
		PreviousInstance: req.PreviousInstance, PreviousProject: req.PreviousProject,
		Trigger: RecordTrigger(req.Trigger),
	}
	if quarantined && q.Wipe != "" {
		// An operator's retirement of a device not cleaned since its last
		// tenant: its retirement run, not the pipeline.
		res, err := c.Engine.Retire(ctx, target, q.Reason, q.Wipe == claims.WipeDeclined)
		if err != nil {
			return CleanResult{}, err
		}
		return CleanResult{Verdict: res.Verdict, RunID: res.RunID, Detail: res.String()}, nil
	}
	if quarantined {
		return CleanResult{Verdict: pipeline.VerdictQuarantine, RunID: q.RunID,
			Detail: fmt.Sprintf("device %s was quarantined at %s by run %s (%s) and never released; its Placement trait was missing and is set again; release it with scourctl placement unquarantine once the cause is fixed",
				req.Device.Address, q.QuarantinedAt.Format(time.RFC3339), q.RunID, q.Reason)}, nil
	}
	res, err := c.Engine.Clean(ctx, target)
	if err != nil {
		return CleanResult{}, err
	}
	return CleanResult{Verdict: res.Verdict, RunID: res.RunID, Detail: res.String()}, nil
}

// RecordTrigger is a cleaning record's triggered_by for what made the
// reconciler queue the device (CleanRequest.Trigger): the notification,
// release, operator command or scan, never a fixed text.
func RecordTrigger(reason string) string {
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
