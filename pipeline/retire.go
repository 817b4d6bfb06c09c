package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// RetireWipeKey is the details key under which the engine marks the
// record of a run's retirement wipe (true): the cleaning record's
// retirement reads it.
const RetireWipeKey = "scour_retire_wipe"

// RetireReadBackKey marks (true) the record of the read-back that checks
// a retirement wipe (RetireReadBackName).
const RetireReadBackKey = "scour_retire_readback"

// Read-back results in Retirement.ReadBack.
const (
	ReadBackPassed        = "passed"
	ReadBackNotApplicable = "not applicable"
)

// Retirement is what became of a device a required step said to retire
// (code 13), set on a quarantine verdict for it.
type Retirement struct {
	// Wiped: the retirement wipe succeeded before the verdict.
	Wiped bool `json:"wiped"`
	// Step names the wipe step (RetireWipeName unless configured).
	Step string `json:"step"`
	// Technique is what the wipe reported it ran (details technique); ""
	// when unwiped, or when a plugin reported none.
	Technique string `json:"technique,omitempty"`
	// Why says why the device is unwiped.
	Why string `json:"why,omitempty"`
	// ReadBack is the outcome of the read-back after the wipe
	// (ReadBackPassed, or ReadBackNotApplicable with why); a failed
	// read-back leaves the device unwiped, with Why saying so. "" when no
	// wipe succeeded.
	ReadBack string `json:"read_back,omitempty"`
}

// retireWipe is the step that erases a device due for retirement: the
// pipeline's retire_wipe, else for an NVMe the built-in nvme-erase with
// every technique allowed (sanitize crypto > block > overwrite, format
// SES 2 > 1, then a zero overwrite), bound to the driver it needs when
// the device is elsewhere. Nil, with why, when none is known.
func (r *run) retireWipe() (*Step, string) { return retireWipeFor(&r.prof.Pipeline, r.dev) }

// retireWipeFor is the retirement wipe pipeline p runs on dev (see
// run.retireWipe); Engine.Plan shows it too.
func retireWipeFor(p *Pipeline, dev *hardware.Device) (*Step, string) {
	if w := p.RetireWipe; w != nil {
		s := *w
		s.retireWipe = true
		return &s, ""
	}
	if dev.Kind != hardware.KindNVMe {
		return nil, fmt.Sprintf("no retirement wipe: none is built in for a device of kind %q, and pipeline %s configures none (retire_wipe)",
			dev.Kind, p.Name)
	}
	s := Step{Name: RetireWipeName, Type: "nvme-erase", Args: map[string]any{"crypto": true, "allow_overwrite": true}, retireWipe: true}
	spec, _ := lookupBuiltin(s.Type)
	if need := spec.Needs[hardware.KindNVMe]; dev.Driver != need {
		s.Driver = need
	}
	s.setDefaults()
	return &s, ""
}

// retire runs when required step gate said retire (code 13, a worn
// drive): before the quarantine verdict it erases the device with the
// retirement wipe, as pipeline step number len(steps) of the run, so that
// a retired drive never leaves for an RMA or disposal holding the last
// tenant's data. The wipe is a destructive step like any other: Placement
// is asked first (rule 2), and the device stays reserved throughout. A
// wipe that failed with a retryable code and run budget left makes the
// verdict retry-later (the next run retires and wipes again); only a
// device that cannot be erased is retired unwiped, and res says so.
// prior are the records of the run's earlier attempts: a wipe already
// done in this run is not repeated.
func (r *run) retire(ctx context.Context, prior []StepRecord, gate string, res *Result) error {
	idx := len(r.prof.Pipeline.Steps)
	ws, none := r.retireWipe()
	var rec StepRecord
	switch {
	case ws == nil:
		rec = StepRecord{RunID: r.run.ID, Index: idx, Name: RetireWipeName, Started: time.Now().UTC(),
			State: StepFailed, Code: plugins.CodeUnsupported, Message: none}
		var err error
		if rec, err = r.finish(ctx, &Step{Name: RetireWipeName, retireWipe: true}, rec, 0, nil); err != nil {
			return err
		}
	default:
		if done, ok := doneIn(prior, r.run.ID, idx, ws.Name); ok {
			rec = done
			break
		}
		var err error
		rec, err = r.step(ctx, idx, ws)
		if ctx.Err() != nil {
			return fmt.Errorf("device %s: run %s interrupted at the retirement wipe (step %s) after %s said retire: %w",
				r.t.Address, r.run.ID, ws.Name, gate, context.Cause(ctx))
		}
		var stop errStop
		if errors.As(err, &stop) {
			// Placement showed the device taken (or could not be asked)
			// before the wipe: nothing was erased, and the device is not
			// retired by this run; the next run decides again.
			r.recs = append(r.recs, rec)
			res.Verdict = stop.verdict
			res.Reason = fmt.Sprintf("%s; the retirement wipe (step %s) did not run: %s", res.Reason, ws.Name, stop.reason)
			return nil
		}
		if err != nil {
			return err
		}
	}
	r.recs = append(r.recs, rec)
	name := rec.Name
	why := rec.Message
	if rec.State == StepSucceeded {
		tech, _ := rec.Details[plugins.TechniqueKey].(string)
		said := tech
		if said == "" {
			said = "the step reported no technique"
		}
		rb, stopped, err := r.retireReadBack(ctx, prior, idx+1, ws, res)
		if err != nil || stopped {
			return err
		}
		// Unsupported: nothing could be read (no media on this device, no
		// driver to expose it): the wipe is not disproved, and the
		// record says the read-back was not possible.
		if rb.State != StepFailed || rb.Code == plugins.CodeUnsupported {
			readBack := ReadBackPassed
			if rb.State != StepSucceeded {
				readBack = ReadBackNotApplicable + ": " + strings.TrimPrefix(rb.Message, "skipped: ")
			}
			res.Verdict = VerdictQuarantine
			res.Retirement = &Retirement{Wiped: true, Step: name, Technique: tech, ReadBack: readBack}
			res.Reason = fmt.Sprintf("%s; wiped before retirement by step %s (%s), read-back %s: it holds none of the last tenant's data; it stays reserved and quarantined: replace it",
				res.Reason, name, said, readBack)
			r.log.Warn("device due for retirement wiped before its quarantine", "step", name, "technique", tech, "read_back", readBack)
			return nil
		}
		rs := retireReadBackStep(ws, r.dev)
		if v, why := r.verdictFor(rs, rb); v == VerdictRetryLater {
			res.Verdict = v
			res.Reason = fmt.Sprintf("%s; before retirement the wipe must be read back, and %s", res.Reason, why)
			return nil
		}
		why = fmt.Sprintf("the wipe (step %s, %s) reported success but its read-back (step %s) failed: %s", name, said, rb.Name, rb.Message)
	} else if rec.State == StepFailed && ws != nil {
		if v, why := r.verdictFor(ws, rec); v == VerdictRetryLater {
			res.Verdict = v
			res.Reason = fmt.Sprintf("%s; before retirement the device must be wiped, and %s", res.Reason, why)
			return nil
		}
	}
	if why == "" {
		why = string(rec.State)
	}
	res.Verdict = VerdictQuarantine
	res.Retirement = &Retirement{Step: name, Why: why}
	res.Reason = fmt.Sprintf("RETIRED UNWIPED: %s; the retirement wipe (step %s) could not erase it: %s. "+
		"The device may still hold the last tenant's data: do not send it for an RMA, resale or disposal as it is; destroy it (shred, or degauss) and record that",
		res.Reason, name, why)
	r.log.Error("device due for retirement could not be wiped: it is retired UNWIPED and may still hold the last tenant's data; destroy it (shred, or degauss) rather than an RMA or disposal as is",
		"step", name, "why", why)
	return nil
}

// retireReadBackStep is the read-back after retirement wipe ws: the
// built-in verify, sampling, on the wipe's driver, comparing the media
// with what the wipe says it leaves (zeros; after a crypto erase, that
// the blocks sampled before it changed).
//
// It runs on the driver verify needs (an NVMe's namespaces exist only on
// nvme), bound for it as the wipe was. A device that exposes no media to
// read (refused before reading: unsupported) is recorded skipped, the
// read-back not applicable, and the record says so.
func retireReadBackStep(ws *Step, dev *hardware.Device) *Step {
	s := Step{Name: RetireReadBackName, Type: "verify", Args: map[string]any{"mode": "sample", "samples": 64},
		Driver: ws.Driver, OnUnsupported: OnUnsupportedSkip, retireReadBack: true}
	if spec, ok := lookupBuiltin(s.Type); ok && s.Driver == "" {
		if need := spec.Needs[dev.Kind]; need != "" && dev.Driver != need {
			s.Driver = need
		}
	}
	s.setDefaults()
	return &s
}

// retireReadBack reads the media back after a successful retirement wipe,
// as step number idx: a wipe that says it erased is believed only when
// the read-back finds what it promises (a cleaning pipeline's verify).
// A wipe that reported no erasure (a plugin naming no expect) has nothing
// to compare with: the read-back is recorded skipped, not applicable.
// stopped: Placement stopped the run before it (res says so).
func (r *run) retireReadBack(ctx context.Context, prior []StepRecord, idx int, ws *Step, res *Result) (StepRecord, bool, error) {
	rs := retireReadBackStep(ws, r.dev)
	if done, ok := doneIn(prior, r.run.ID, idx, rs.Name); ok {
		r.recs = append(r.recs, done)
		return done, false, nil
	}
	var rec StepRecord
	var err error
	if r.lastErasure() == nil {
		rec = StepRecord{RunID: r.run.ID, Index: idx, Name: rs.Name, Started: time.Now().UTC(), State: StepSkipped,
			Message: fmt.Sprintf("skipped: not applicable: the wipe (step %s) reported no erase pattern (details %s, %s) to read back", ws.Name, plugins.EraseKey, plugins.ExpectKey)}
		rec, err = r.finish(ctx, rs, rec, 0, nil)
	} else {
		rec, err = r.step(ctx, idx, rs)
	}
	if ctx.Err() != nil {
		return rec, false, fmt.Errorf("device %s: run %s interrupted at the read-back (step %s) of the retirement wipe: %w",
			r.t.Address, r.run.ID, rs.Name, context.Cause(ctx))
	}
	var stop errStop
	if errors.As(err, &stop) {
		r.recs = append(r.recs, rec)
		res.Verdict = stop.verdict
		res.Reason = fmt.Sprintf("%s; the read-back (step %s) of the retirement wipe did not run: %s", res.Reason, rs.Name, stop.reason)
		return rec, true, nil
	}
	if err != nil {
		return rec, false, err
	}
	r.recs = append(r.recs, rec)
	return rec, false, nil
}

// retireMode says whether a run is an operator's retirement (Engine.Retire).
type retireMode int

const (
	retireNone   retireMode = iota // a cleaning run of the pipeline
	retireWipe                     // scourctl retire: the retirement wipe alone
	retireNoWipe                   // scourctl retire --no-wipe: nothing run, recorded NOT WIPED
)

// NoWipeWhy is why a device retired with scourctl retire --no-wipe is
// unwiped, as its record and verdict say.
const NoWipeWhy = "NOT WIPED (operator chose --no-wipe)"

// retireWipeName names the step a retirement run plans: the retirement
// wipe's, or RetireWipeName when none is known.
func (r *run) retireWipeName() string {
	if ws, _ := r.retireWipe(); ws != nil {
		return ws.Name
	}
	return RetireWipeName
}

// retireByOperator is an operator's retirement run (Engine.Retire): the
// retirement wipe as step number len(steps), as a worn drive's; with
// --no-wipe that step is recorded skipped and the device retired unwiped.
func (r *run) retireByOperator(ctx context.Context, prior []StepRecord, res *Result) (*Result, error) {
	res.Reason = r.t.retireReason
	if res.Reason == "" {
		res.Reason = "retired by an operator"
	}
	if r.retiring == retireNoWipe {
		idx, name := len(r.prof.Pipeline.Steps), r.retireWipeName()
		rec, ok := doneIn(prior, r.run.ID, idx, name)
		if !ok {
			rec = StepRecord{RunID: r.run.ID, Index: idx, Name: name, Started: time.Now().UTC(),
				State: StepSkipped, Message: "skipped: " + NoWipeWhy + ": the device was not erased before its retirement"}
			var err error
			if rec, err = r.finish(ctx, &Step{Name: name, retireWipe: true}, rec, 0, nil); err != nil {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("device %s: run %s interrupted recording its retirement: %w", r.t.Address, r.run.ID, context.Cause(ctx))
			}
		}
		r.recs = append(r.recs, rec)
		res.Verdict = VerdictQuarantine
		res.Retirement = &Retirement{Step: name, Why: NoWipeWhy}
		res.Reason = fmt.Sprintf("RETIRED UNWIPED: %s; %s. "+
			"The device may still hold the last tenant's data: do not send it for an RMA, resale or disposal as it is; destroy it (shred, or degauss) and record that",
			res.Reason, NoWipeWhy)
		r.log.Error("device retired by an operator with --no-wipe: it is retired UNWIPED and may still hold the last tenant's data; destroy it (shred, or degauss)")
	} else if err := r.retire(ctx, prior, "an operator (scourctl retire)", res); err != nil {
		return nil, err
	}
	res.Steps, res.Serial, res.Model = r.recs, r.serial, r.model
	return res, nil
}
