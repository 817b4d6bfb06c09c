// Package pipelinestore makes the claims store the pipeline engine's
// checkpoint store (pipeline.Checkpoints) for one host: runs, step
// checkpoints and verdicts land in cleaning_runs/cleaning_steps, so every
// cleaning the engine does becomes an exportable record.
package pipelinestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/version"
)

// Checkpoints implements pipeline.Checkpoints on a claims.Store.
type Checkpoints struct {
	Store *claims.Store
	Host  string
	// Trigger is recorded as the triggered_by of a run whose RunStart
	// names no trigger of its own (default "pipeline engine").
	Trigger string
	// Optional tells which steps of a run's pipeline may fail without
	// blocking a clean verdict (the pipeline config's required: false).
	// Nil treats every step as required; then a clean verdict after a
	// failed step is refused by the store (safety rule 1).
	Optional func(start pipeline.RunStart, index int) bool

	mu sync.Mutex
	// starts holds the runs this process opened or resumed, so that each
	// step's checkpoint is one transaction and not a read of the run
	// first. A run missing here (another Checkpoints opened it) is read.
	starts map[string]pipeline.RunStart
	// opened holds, by run, the attempt this process started and has not
	// finished: StepFinished closes exactly that one, never an attempt
	// left open by a process that died.
	opened map[string]claims.Step
}

var _ pipeline.Checkpoints = (*Checkpoints)(nil)

// OpenRun resumes the device's unfinished run (with its latest attempt of
// each step) or opens a new one, naming the device's previous tenant: the
// last consumer known to hold it (claims.Store.PreviousTenant). A cleaned
// run waiting for its un-reserve is resumed too: its steps are all done,
// so the engine reaches the clean verdict again without touching the
// device, and the caller retries the un-reserve on the same record. A
// resumed run comes with its Placement generation (NoteClearGeneration)
// and, cleaned, whether an un-reserve PUT of it may have landed.
func (c *Checkpoints) OpenRun(ctx context.Context, start pipeline.RunStart) (pipeline.Run, []pipeline.StepRecord, error) {
	rs := claims.RunStart{Host: c.Host, DeviceRP: start.RPUUID, Address: start.Device, Profile: start.Profile,
		Pipeline: start.Pipeline, PipelineVersion: strconv.Itoa(start.PipelineVersion), PlannedSteps: start.Steps, Trigger: start.Trigger,
		Serial: start.Serial, SerialSource: start.SerialSource, Model: start.Model, Category: start.Category, ScourVersion: version.Version,
		Media: claims.Media{Make: start.Vendor, Firmware: start.Firmware, Type: start.Kind, CapacityBytes: start.CapacityBytes}}
	if rs.Trigger == "" {
		rs.Trigger = c.Trigger
	}
	if rs.Trigger == "" {
		rs.Trigger = "pipeline engine"
	}
	if rs.DeviceRP != "" {
		prev, ok, err := c.Store.PreviousTenant(ctx, c.Host, rs.DeviceRP)
		if err != nil {
			return pipeline.Run{}, nil, err
		}
		if ok {
			rs.PrevInstance, rs.PrevProject = prev.Instance, prev.Project
		}
	}
	run, resumed, err := c.Store.OpenRun(ctx, rs)
	if err != nil {
		return pipeline.Run{}, nil, err
	}
	out := pipeline.Run{ID: run.ID, Attempt: run.Attempt, Start: runStart(run)}
	c.remember(run.ID, out.Start)
	if !resumed {
		return out, nil, nil
	}
	if out.ClearGen, out.HasClearGen, err = c.Store.ClearGeneration(ctx, run.ID); err != nil {
		return pipeline.Run{}, nil, err
	}
	if run.AwaitingReturn() {
		// Only a cleaned run has a journal: a running one's reads as a PUT
		// at an unknown generation (unreserve_journaled 0).
		if _, out.PutMayHaveLanded, err = c.Store.PutJournal(run.ID).LastPut(ctx); err != nil {
			return pipeline.Run{}, nil, err
		}
	}
	steps, err := c.Store.Steps(ctx, run.ID)
	if err != nil {
		return pipeline.Run{}, nil, err
	}
	return out, latestPerIndex(steps), nil
}

var _ pipeline.GenerationRecorder = (*Checkpoints)(nil)

// NoteClearGeneration keeps the Placement generation of the all-clear the
// run's first destructive attempt starts on (claims.Store.NoteClearGeneration).
func (c *Checkpoints) NoteClearGeneration(ctx context.Context, runID string, gen int) error {
	return c.Store.NoteClearGeneration(ctx, runID, gen)
}

// latestPerIndex turns attempts into the engine's one record per step.
func latestPerIndex(steps []claims.Step) []pipeline.StepRecord {
	pos := map[int]int{}
	var recs []pipeline.StepRecord
	for _, st := range steps {
		rec := toRecord(st)
		if i, ok := pos[st.Index]; ok {
			recs[i] = rec
			continue
		}
		pos[st.Index] = len(recs)
		recs = append(recs, rec)
	}
	return recs
}

func toRecord(st claims.Step) pipeline.StepRecord {
	rec := pipeline.StepRecord{RunID: st.RunID, Index: st.Index, Name: st.Name, Attempts: st.Attempt, Started: st.StartedAt,
		Progress: float64(st.Progress) / 100, Code: st.Code, Message: st.Output, Details: st.Details, Stderr: st.Stderr}
	if st.EndedAt != nil {
		rec.Finished = *st.EndedAt
	}
	switch st.Outcome {
	case claims.StepOK:
		rec.State = pipeline.StepSucceeded
	case claims.StepSkipped:
		rec.State = pipeline.StepSkipped
	case claims.StepFailed:
		rec.State = pipeline.StepFailed
	default: // running, or interrupted by a crash: not done, run it again
		rec.State = pipeline.StepRunning
	}
	return rec
}

// StepStarted records the start of step rec.Index, committed before the
// engine starts the step's work.
func (c *Checkpoints) StepStarted(ctx context.Context, runID string, rec pipeline.StepRecord) error {
	st, err := c.stepStart(ctx, runID, rec)
	if err != nil {
		return err
	}
	opened, err := c.Store.StepStarted(ctx, st)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened == nil {
		c.opened = map[string]claims.Step{}
	}
	c.opened[runID] = opened
	return nil
}

// stepStart describes an attempt of step rec.Index, optional or not as the
// run's pipeline says.
func (c *Checkpoints) stepStart(ctx context.Context, runID string, rec pipeline.StepRecord) (claims.StepStart, error) {
	st := claims.StepStart{RunID: runID, Name: rec.Name, Index: rec.Index}
	if c.Optional == nil {
		return st, nil
	}
	c.mu.Lock()
	start, ok := c.starts[runID]
	c.mu.Unlock()
	if !ok {
		run, err := c.Store.GetRun(ctx, runID)
		if err != nil {
			return st, err
		}
		start = runStart(run)
	}
	st.Optional = c.Optional(start, rec.Index)
	return st, nil
}

func runStart(run claims.Run) pipeline.RunStart {
	version, _ := strconv.Atoi(run.PipelineVersion)
	return pipeline.RunStart{Device: run.Address, RPUUID: run.DeviceRP, Profile: run.Profile, Pipeline: run.Pipeline,
		PipelineVersion: version, Steps: run.PlannedSteps, Started: run.StartedAt, Serial: run.Serial, SerialSource: run.SerialSource, Model: run.Model, Firmware: run.Media.Firmware, Trigger: run.Trigger, Category: run.Category}
}

// remember keeps the run's start for its steps, forgetting any earlier
// run of the same device (one ended without a verdict, by a shutdown).
func (c *Checkpoints) remember(runID string, start pipeline.RunStart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts == nil {
		c.starts = map[string]pipeline.RunStart{}
	}
	for id, s := range c.starts {
		if s.RPUUID == start.RPUUID {
			delete(c.starts, id)
			delete(c.opened, id)
		}
	}
	c.starts[runID] = start
	// Resumed: an attempt this process started before is no longer its
	// own to finish (the engine was stopped during it).
	delete(c.opened, runID)
}

func (c *Checkpoints) forget(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.starts, runID)
	delete(c.opened, runID)
}

// takeOpened returns, and forgets, the attempt of step index that this
// process started in the run and has not finished.
func (c *Checkpoints) takeOpened(runID string, index int) (claims.Step, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.opened[runID]
	if !ok || st.Index != index {
		return claims.Step{}, false
	}
	delete(c.opened, runID)
	return st, true
}

// StepProgress records the open attempt's progress (fraction 0..1).
func (c *Checkpoints) StepProgress(ctx context.Context, runID string, step int, fraction float64) error {
	err := c.Store.StepIndexProgress(ctx, runID, step, int(fraction*100+0.5))
	if errors.Is(err, claims.ErrNoStep) {
		return nil // no open attempt: progress of a finished step is moot
	}
	return err
}

// StepFinished records the step's outcome, in one transaction: it closes
// the attempt this process started (by its seq). A step the engine decided
// without starting it here (unsupported, skipped) gets an attempt opened
// and closed in it, after any attempt a process that died left open,
// closed as interrupted (claims.Store.FinishStep).
func (c *Checkpoints) StepFinished(ctx context.Context, runID string, rec pipeline.StepRecord) error {
	var outcome claims.StepOutcome
	switch rec.State {
	case pipeline.StepSucceeded:
		outcome = claims.StepOK
	case pipeline.StepSkipped:
		outcome = claims.StepSkipped
	case pipeline.StepFailed:
		outcome = claims.StepFailed
	default:
		return fmt.Errorf("pipelinestore: step %s of run %s finished in state %q", rec.Name, runID, rec.State)
	}
	res := claims.StepResult{Outcome: outcome, Output: rec.Message, Code: rec.Code, Details: rec.Details, Stderr: rec.Stderr}
	if opened, ok := c.takeOpened(runID, rec.Index); ok {
		return c.Store.StepFinished(ctx, runID, opened.Seq, res)
	}
	st, err := c.stepStart(ctx, runID, rec)
	if err != nil {
		return err
	}
	return c.Store.FinishStep(ctx, st, res)
}

// FinishRun gives the run the engine's verdict. Clean becomes cleaned
// (refused by the store unless every required step succeeded), which
// becomes returned only once the caller un-reserved the device
// (claims.Store.MarkReturned); retry-later becomes failed (a later run
// retries).
func (c *Checkpoints) FinishRun(ctx context.Context, runID string, res pipeline.Result) error {
	state, ok := map[pipeline.Verdict]claims.RunState{
		pipeline.VerdictClean:      claims.RunCleaned,
		pipeline.VerdictQuarantine: claims.RunQuarantined,
		pipeline.VerdictAborted:    claims.RunAborted,
		pipeline.VerdictRetryLater: claims.RunFailed,
		pipeline.VerdictNoProfile:  claims.RunFailed,
	}[res.Verdict]
	if !ok {
		return errors.New("pipelinestore: unknown verdict " + string(res.Verdict))
	}
	defer c.forget(runID)
	err := c.Store.FinishRun(ctx, runID, state, res.String())
	if state == claims.RunCleaned && errors.Is(err, claims.ErrNotClean) {
		// The store refused the clean verdict (a purge run without a
		// successful erase and a passed verification after it): the
		// device must not return, and resuming
		// the same run cannot change that. Quarantined, it stays reserved
		// visibly until an operator fixes the pipeline or the device.
		why := "the record store refused the clean verdict: " + err.Error()
		if qerr := c.Store.FinishRun(ctx, runID, claims.RunQuarantined, why); qerr != nil {
			return errors.Join(err, qerr)
		}
	}
	return err
}

var _ pipeline.IdentityRecorder = (*Checkpoints)(nil)

// SetIdentity records the serial, model and firmware a step's driver revealed.
func (c *Checkpoints) SetIdentity(ctx context.Context, runID, serial, model, firmware string) error {
	return c.Store.SetRunIdentity(ctx, runID, serial, model, firmware)
}
