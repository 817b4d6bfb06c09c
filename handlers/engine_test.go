package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// The gate's refusals, wrapped as the client wraps them (DeviceError,
// even around a Placement 4xx), are handled by the handlers, never
// poisoned as permanent; a plain 4xx is.
func TestGateRefusalsAreNotPermanent(t *testing.T) {
	t.Parallel()
	for _, refusal := range []error{placement.ErrAllocated, placement.ErrNotAllocated, placement.ErrUnmanaged,
		placement.ErrQuarantined, placement.ErrUnreservedElsewhere, placement.ErrStaleReturn} {
		err := error(&placement.DeviceError{Op: "unreserve", Dev: placement.Ref{UUID: "rp-1"},
			Err: fmt.Errorf("%w: %w", refusal, &placement.APIError{Status: 400})})
		if handlers.IsPermanent(err) {
			t.Errorf("%v is permanent", err)
		}
	}
	// A run closed meanwhile: the journal refused before any PUT.
	if err := error(&placement.DeviceError{Op: "unreserve", Err: claims.ErrNotCleaned}); handlers.IsPermanent(err) {
		t.Errorf("%v is permanent", err)
	}
	if err := error(&placement.DeviceError{Op: "burn", Err: &placement.APIError{Status: 400}}); !handlers.IsPermanent(err) {
		t.Errorf("%v is not permanent", err)
	}
}

// engineSpy is an Engine that records whether it ran, answering clean.
type engineSpy struct{ cleaned, retired int }

func (e *engineSpy) Clean(_ context.Context, t pipeline.Target) (*pipeline.Result, error) {
	e.cleaned++
	return &pipeline.Result{Verdict: pipeline.VerdictClean, RunID: "run-new", Device: string(t.Address)}, nil
}

func (e *engineSpy) Retire(_ context.Context, t pipeline.Target, _ string, _ bool) (*pipeline.Result, error) {
	e.retired++
	return &pipeline.Result{Verdict: pipeline.VerdictClean, RunID: "run-retire", Device: string(t.Address)}, nil
}

// quarantineRecords is a Records whose ActiveQuarantine answers q, held.
type quarantineRecords struct {
	handlers.Records
	q    claims.Quarantine
	held bool
}

func (r quarantineRecords) ActiveQuarantine(context.Context, string, string) (claims.Quarantine, bool, error) {
	return r.q, r.held, nil
}

// A device the claims store holds quarantined is never cleaned, whether
// or not Placement still shows its quarantine trait (rule 4): the verdict
// is quarantine again, naming the run that quarantined it, and the engine
// does not run. Without a store quarantine it is cleaned.
func TestStoreQuarantineRefusesCleaningWhateverPlacementShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := claims.Quarantine{RunID: "run-q", Reason: "sanitize failed", QuarantinedAt: time.Unix(0, 0)}
	for _, trait := range []bool{false, true} {
		e := &engineSpy{}
		c := handlers.EngineCleaner{Engine: e, Records: quarantineRecords{q: q, held: true}, Host: "compute-1"}
		d := handlers.Device{RPUUID: "rp-1", Address: "0000:81:00.0", Total: 1, Reserved: 1, Quarantined: trait}
		res, err := c.Clean(ctx, handlers.CleanRequest{Device: d})
		if err != nil || res.Verdict != pipeline.VerdictQuarantine || res.RunID != "run-q" || e.cleaned+e.retired != 0 {
			t.Errorf("store quarantine, Placement trait %v: %+v %v, engine ran %d; want quarantine by run-q and no run", trait, res, err, e.cleaned+e.retired)
		}
	}
	e := &engineSpy{}
	c := handlers.EngineCleaner{Engine: e, Records: quarantineRecords{}, Host: "compute-1"}
	res, err := c.Clean(ctx, handlers.CleanRequest{Device: handlers.Device{RPUUID: "rp-1", Address: "0000:81:00.0", Total: 1, Reserved: 1}})
	if err != nil || res.Verdict != pipeline.VerdictClean || e.cleaned != 1 {
		t.Errorf("no store quarantine: %+v %v, engine ran %d; want clean by the engine", res, err, e.cleaned)
	}
	// A retirement waiting for its wipe runs the retirement run instead.
	q.Wipe = claims.WipePending
	e = &engineSpy{}
	c = handlers.EngineCleaner{Engine: e, Records: quarantineRecords{q: q, held: true}, Host: "compute-1"}
	if res, err := c.Clean(ctx, handlers.CleanRequest{Device: handlers.Device{RPUUID: "rp-1", Address: "0000:81:00.0"}}); err != nil || e.retired != 1 || e.cleaned != 0 || res.RunID != "run-retire" {
		t.Errorf("pending retirement wipe: %+v %v, retired %d cleaned %d; want the retirement run only", res, err, e.retired, e.cleaned)
	}
}
