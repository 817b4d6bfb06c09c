package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/version"
)

// step runs pipeline step i and returns its finished, persisted record.
func (r *run) step(ctx context.Context, i int, s *Step) (StepRecord, error) {
	rec := StepRecord{RunID: r.run.ID, Index: i, Name: s.Name, Started: time.Now().UTC()}
	log := r.log.With("step", s.Name, "run", r.run.ID)
	impl := r.e.impl(s)

	if err := r.settleDriver(s); err != nil {
		return rec, err
	}
	if why, details := pointless(impl, s, r.lastErasure()); why != "" {
		rec.State, rec.Message, rec.Details = StepSkipped, "skipped: "+why, details
		log.Info("step not run", "state", rec.State, "reason", rec.Message)
		return r.finish(ctx, s, rec, 0, nil)
	}
	// A step that binds another driver sees the device's capabilities
	// only once bound (an NVMe on vfio-pci has no controller to ask):
	// its requirements and CHECK are evaluated after the bind, below.
	rebinds := s.Driver != "" && r.dev.Driver != s.Driver
	if rebinds {
		// Taking a device from its driver is as disruptive to an
		// instance using it as a destructive step: Placement is asked
		// first (and again just before the unbind when that answer aged
		// meanwhile: onDriver).
		if err := r.placementClear(ctx, s, ""); err != nil {
			return rec, err
		}
	} else {
		why, err := r.supportedAndClear(ctx, s, impl)
		var stop errStop
		if errors.As(err, &stop) {
			return rec, err
		}
		if err != nil || why != "" {
			r.notRun(&rec, s, why, err)
			log.Info("step not run", "state", rec.State, "reason", rec.Message)
			return r.finish(ctx, s, rec, 0, nil)
		}
	}
	rec.State = StepRunning
	if err := r.e.cp.StepStarted(ctx, r.run.ID, rec); err != nil {
		return rec, fmt.Errorf("device %s: recording start of step %s: %w", r.t.Address, s.Name, err)
	}
	log.Info("step started", "destructive", *s.Destructive)
	began := time.Now()
	var unsup *notSupported
	var stop errStop
	var t tries
	res, err := r.withDriver(ctx, i, s, func(dev *hardware.Device) (*plugins.Result, error) {
		if rebinds {
			if err := r.learnIdentity(ctx, dev); err != nil {
				return nil, err
			}
			if why, err := r.unsupported(ctx, s, impl, dev); err != nil {
				return nil, err
			} else if why != "" {
				return nil, &notSupported{why}
			}
		}
		if !*s.InDevice {
			release, err := r.hostSlot(ctx, s)
			if err != nil {
				return nil, err
			}
			defer release()
		}
		return r.attempts(ctx, s, &rec, &t, impl, dev)
	})
	notApplicable := ""
	if err == nil {
		// A verification is part of the step's outcome, whatever its
		// status said.
		notApplicable, err = r.judge(s, res)
	}
	switch {
	case errors.As(err, &stop):
		// Placement showed the device taken while the step waited for a
		// slot, or before a retry: it did not run (again). Recorded failed
		// (not skipped), so that a crash before the verdict is stored runs
		// it again, checks first.
		rec.State, rec.Code, rec.Message = StepFailed, plugins.CodeTryAgainLater, "not run: "+stop.reason
		log.Warn("step not run", "reason", stop.reason)
		if _, ferr := r.finish(ctx, s, rec, time.Since(began), &t); ferr != nil {
			return rec, ferr
		}
		return rec, stop
	case errors.As(err, &unsup):
		r.notRun(&rec, s, unsup.why, nil)
		log.Info("step not run", "state", rec.State, "reason", rec.Message, "driver", s.Driver)
	case s.OnUnsupported == OnUnsupportedSkip && refusedBeforeActing(impl, err):
		rec.State, rec.Message = StepSkipped, "skipped: "+plugins.AsError(err).Msg
		log.Info("step not run", "state", rec.State, "reason", rec.Message)
	case err != nil:
		pe := plugins.AsError(err)
		rec.State, rec.Code, rec.Message, rec.Details, rec.Stderr = StepFailed, pe.Code, pe.Msg, pe.Details, pe.Stderr
		log.Warn("step failed", "code", pe.Code, "error", pe.Msg, "attempts", rec.Attempts)
	case notApplicable != "":
		rec.State, rec.Details, rec.Stderr, rec.Progress = StepSkipped, res.Details, res.Stderr, 1
		rec.Message = "skipped: its verification could not verify anything (not applicable): " + notApplicable
		log.Info("step proved nothing", "state", rec.State, "reason", rec.Message)
	default:
		rec.State, rec.Details, rec.Stderr, rec.Progress = StepSucceeded, res.Details, res.Stderr, 1
		log.Info("step succeeded", "seconds", time.Since(began).Seconds())
	}
	return r.finish(ctx, s, rec, time.Since(began), &t)
}

// finish stamps and stores the step's outcome. Only a step that started
// an attempt names the tools it ran and its tries (t: what its attempts
// left): one skipped, refused, or stopped before its first attempt ran
// none.
func (r *run) finish(ctx context.Context, s *Step, rec StepRecord, took time.Duration, t *tries) (StepRecord, error) {
	rec.Finished = time.Now().UTC()
	details := make(map[string]any, len(rec.Details)+1) // never the step's own map
	for k, v := range rec.Details {
		details[k] = v
	}
	details[DefinitionKey] = r.def
	delete(details, ToolKey) // the engine's word, never the step's
	delete(details, ExternalToolsKey)
	delete(details, TriesKey)
	delete(details, RetireWipeKey)
	delete(details, RetireReadBackKey)
	switch {
	case s.retireWipe:
		details[RetireWipeKey] = true
	case s.retireReadBack:
		details[RetireReadBackKey] = true
	}
	if rec.Attempts > 0 && t != nil {
		details[TriesKey] = t.details(rec.Attempts)
		details[ToolKey] = toolOf(s, t)
		if ext := r.externalTools(ctx, s); len(ext) > 0 {
			details[ExternalToolsKey] = ext
		}
	}
	rec.Details = details
	r.e.m.stepDone(r.prof.Name, s.Name, string(rec.State), took)
	r.e.m.progress.DeleteLabelValues(string(r.t.Address), s.Name)
	if ctx.Err() != nil {
		return rec, nil // interrupted: the run stays open, the step unfinished
	}
	if err := r.e.cp.StepFinished(ctx, r.run.ID, rec); err != nil {
		return rec, fmt.Errorf("device %s: recording outcome of step %s: %w", r.t.Address, s.Name, err)
	}
	return rec, nil
}

// notSupported carries, out of withDriver, why a step's requirements or
// CHECK refused the device as seen on the step's driver.
type notSupported struct{ why string }

func (n *notSupported) Error() string { return n.why }

// notRun fills rec for a step that did not run: unsupported (failed with
// code unsupported, or skipped when the step says so), or an error of the
// check itself.
func (r *run) notRun(rec *StepRecord, s *Step, why string, err error) {
	rec.State, rec.Code, rec.Message = StepFailed, plugins.CodeUnsupported, why
	if err != nil {
		pe := plugins.AsError(err)
		rec.Code, rec.Message, rec.Stderr = pe.Code, pe.Msg, pe.Stderr
	} else if s.OnUnsupported == OnUnsupportedSkip {
		rec.State, rec.Code = StepSkipped, 0
		rec.Message = "skipped: " + why
	}
}

// unsupported checks the step's capability requirements against dev (as
// discovered on the driver the step runs on), then (plugins) the plugin's
// VERSION and CHECK. It returns why the device is unsupported, or an
// error for any other failure, a requirement on a capability discovery
// could not read among them (unknownRequirement).
func (r *run) unsupported(ctx context.Context, s *Step, impl stepImpl, dev *hardware.Device) (string, error) {
	req, err := ParseRequirements(s.Requires)
	if err != nil {
		return "", plugins.Errorf(plugins.CodeInvalidConfig, "step %s requires: %v", s.Name, err)
	}
	if err := unknownRequirement(s, dev); err != nil {
		return "", err
	}
	if ok, unmet := req.Match(dev.Capabilities); !ok {
		where := ""
		if s.Driver != "" {
			where = fmt.Sprintf(" (device as seen bound to %s)", dev.Driver)
		}
		return fmt.Sprintf("requirements unmet%s: %v", where, unmet), nil
	}
	return impl.check(ctx, r, s, dev)
}

// unknownRequirement fails step s when one of its requirements names a
// capability discovery could not read on dev (hardware.Device.Unknown:
// a tool missing, failing or timing out, a driver that hides it). Such a
// requirement is neither met nor unmet: the step must neither be skipped
// (on_unsupported: skip would let a run whose only erase was never tried
// come out clean) nor fail as unsupported (code 2, a permanent
// quarantine for a tool that timed out once). It fails as the built-ins
// do when id-ctrl could not be read: an NVMe capability unknown because
// the device is not bound to nvme, on a step that does not bind it,
// is the step's configuration (code 3: give it driver: nvme; retried,
// never quarantined); anything else is try-again-later (code 11).
func unknownRequirement(s *Step, dev *hardware.Device) error {
	var unknown []string
	offNVMe := false
	for _, name := range slices.Sorted(maps.Keys(s.Requires)) {
		why, ok := dev.Unknown(name)
		if !ok {
			continue
		}
		unknown = append(unknown, fmt.Sprintf("%s (%s)", name, why))
		offNVMe = offNVMe || (strings.HasPrefix(name, "nvme.") && dev.Kind == hardware.KindNVMe && dev.Driver != "nvme" && s.Driver != "nvme")
	}
	if len(unknown) == 0 {
		return nil
	}
	list := strings.Join(unknown, "; ")
	if offNVMe {
		return plugins.Errorf(plugins.CodeInvalidConfig, "device %s: step %s requires capabilities that cannot be read while the NVMe is bound to %q (no controller to ask): %s; nothing was done to the device: give the step `driver: nvme` in its pipeline (docs/pipelines.md), which binds nvme for the step and evaluates its requirements there; the device stays reserved and is retried",
			dev.Address, s.Name, dev.Driver, list)
	}
	return plugins.Errorf(plugins.CodeTryAgainLater, "device %s: step %s requires capabilities discovery could not read on driver %q: %s; unknown is neither met nor unmet, so the step was neither run nor skipped and nothing was done to the device; it stays reserved and is tried again later: check the tool named (hardware.tools, hardware.tool_timeout; scourctl devices shows why each capability is absent)",
		dev.Address, s.Name, dev.Driver, list)
}

// checkOutcome is what a step's requirements and CHECK said: why the
// device is unsupported, or an error of the check itself.
type checkOutcome struct {
	why string
	err error
}

// supportedAndClear runs, for step s on the device as it is (no driver
// switch), the step's requirements and CHECK (unsupported) and, for a
// destructive step, the Placement check (placementClear) side by side:
// a plugin's CHECK process and a Placement listing each take tens to
// hundreds of milliseconds, and the step waits for both. Placement
// decides first: "in use", or no answer, is the errStop, whatever the
// CHECK said, and a CHECK still running is cancelled (the runner kills
// its process group) and waited for. Otherwise the CHECK's outcome is
// returned as unsupported's. An answer that aged past
// placementAnswerMaxAge while the CHECK ran is asked again immediately
// before the step's first attempt (attempts, clearNow): the step never
// starts on an answer older than that, whatever its CHECK took.
func (r *run) supportedAndClear(ctx context.Context, s *Step, impl stepImpl) (string, error) {
	if !*s.Destructive {
		return r.unsupported(ctx, s, impl, r.dev)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	checked := make(chan checkOutcome, 1)
	go func() {
		why, err := r.unsupported(cctx, s, impl, r.dev)
		checked <- checkOutcome{why, err}
	}()
	stop := r.placementClear(ctx, s, "")
	if stop != nil {
		cancel()
		<-checked // no CHECK process outlives the step's refusal
		return "", stop
	}
	c := <-checked
	return c.why, c.err
}

// learnIdentity keeps the serial, model and firmware a step's driver
// revealed (an NVMe bound to vfio-pci shows none of them, or what the
// backend remembered from before the tenant, whose passthrough could
// update the firmware) for the run's record. A serial
// other than the run's stops the run (retry-later) before the step: the
// drive in the slot was replaced (while scourd was down, the home driver
// showing no serial), and what the run did so far was done to the old
// one. The record keeps the old drive's serial; the next run starts over.
// A VPD serial (the home discovery's, on a fresh scourd) is compared with
// VPD serials only: the first step bound to nvme replaces it with the
// Identify Controller serial (otherDrive).
func (r *run) learnIdentity(ctx context.Context, dev *hardware.Device) error {
	if dev == nil || (dev.Serial == "" && dev.Model == "") {
		return nil
	}
	firmware := cmp.Or(dev.Firmware, r.firmware)
	if r.serial == dev.Serial && r.model == dev.Model && r.firmware == firmware {
		return nil
	}
	if dev.SerialSource == hardware.SerialFromVPD {
		// Only the PCI function's VPD, as the home discovery saw it: the
		// driver's serial (when known) is what the record and later
		// steps compare with, and SetIdentity stores a driver's serial.
		return nil
	}
	if otherDrive(r.serial, r.serialSource, dev.Serial, dev.SerialSource) {
		r.log.Error("device reports another serial on the step's driver: stopping the run", "serial", dev.Serial, "run_serial", r.serial, "driver", dev.Driver)
		return errStop{VerdictRetryLater, fmt.Sprintf("device %s reports serial %q bound to %s, not %q as recorded for run %s: the drive in the slot was replaced (or reports its serial differently there), and nothing this run did counts for it; it stays reserved and the next run starts from the first step",
			r.t.Address, dev.Serial, dev.Driver, r.serial, r.run.ID)}
	}
	r.serial, r.serialSource, r.model, r.firmware = dev.Serial, dev.SerialSource, dev.Model, firmware
	if ir, ok := r.e.cp.(IdentityRecorder); ok {
		if err := ir.SetIdentity(ctx, r.run.ID, dev.Serial, dev.Model, firmware); err != nil {
			r.log.Warn("recording the device's serial, model and firmware failed", "error", err)
		}
	}
	return nil
}

// placementClear asks Placement, immediately before a destructive step
// (alongside its CHECK: supportedAndClear) and before each of its
// retries, whether the device was allocated meanwhile. done is "" before
// the step's first attempt; before a retry it says what already ran, so
// the reason never claims the device was left untouched. An all-clear
// is recorded with how old it is (r.cleared): when its request began
// (DatedChecker: for an answer reused from an earlier read, when that
// read began), or when it was asked for.
func (r *run) placementClear(ctx context.Context, s *Step, done string) error {
	at, untouched := "destructive step "+s.Name, ", without touching the device"
	if done != "" {
		at, untouched = fmt.Sprintf("the retry of destructive step %s", s.Name), fmt.Sprintf(", after %s: the device may be partly erased", done)
	}
	asOf := time.Now()
	check := func(ctx context.Context, rp string) (bool, error) {
		if dc, ok := r.e.alloc.(DatedChecker); ok {
			has, when, err := dc.HasAllocationsAsOf(ctx, rp)
			asOf = when
			return has, err
		}
		return r.e.alloc.HasAllocations(ctx, rp)
	}
	if rc, ok := r.e.alloc.(RetiredChecker); ok && r.retiring != retireNone {
		check = rc.HasAllocationsRetired
	}
	has, err := check(ctx, r.t.RPUUID)
	if err != nil {
		return errStop{VerdictRetryLater, fmt.Sprintf("cannot ask Placement whether %s (rp %s) is allocated before %s: %v%s", r.t.Address, r.t.RPUUID, at, err, untouched)}
	}
	if has {
		// The checker (placement.Gate.HasAllocations, or
		// HasAllocationsRetired for a retirement wipe) answers "in use"
		// for an allocation, usage, a reservation lifted meanwhile or a
		// quarantine trait set or lost: the message must not claim more
		// than it knows.
		r.log.Error("Placement no longer shows the device dirty: aborting before the step (again)", "step", s.Name, "done", done)
		return errStop{VerdictAborted, fmt.Sprintf("Placement no longer shows the device dirty (allocated, in use, un-reserved or quarantined meanwhile): %s (rp %s) aborted at the allocation check before %s%s", r.t.Address, r.t.RPUUID, at, untouched)}
	}
	r.cleared = asOf
	return nil
}

// maxClearAsks bounds clearNow's questions: a Placement whose answers
// each take placementAnswerMaxAge or more is too slow to start a step on.
const maxClearAsks = 3

// clearNow makes sure the all-clear a driver unbind or a destructive
// attempt is about to start on (r.cleared) is younger than
// placementAnswerMaxAge, asking Placement again (placementClear) while it
// is not: a CHECK, a driver bind, a checkpoint or a slow answer aged it.
// An answer reused from the release's read is dated by that read, so it
// is never older at the step's start than a fresh one may be. After
// maxClearAsks more answers each too old by the time they came, the run
// stops with retry-later.
func (r *run) clearNow(ctx context.Context, s *Step, done string) error {
	for asked := 0; time.Since(r.cleared) >= r.e.placementAnswerMaxAge; asked++ {
		if asked == maxClearAsks {
			after := ""
			if done != "" {
				after = fmt.Sprintf(" (after %s: the device may be partly erased)", done)
			}
			return errStop{VerdictRetryLater, fmt.Sprintf("Placement's all-clear for %s (rp %s) was %s old or more by the time it came, %d times in a row: too slow an answer to start step %s on%s; it stays reserved and is retried later (check Placement's latency)",
				r.t.Address, r.t.RPUUID, r.e.placementAnswerMaxAge, maxClearAsks+1, s.Name, after)}
		}
		if err := r.placementClear(ctx, s, done); err != nil {
			return err
		}
	}
	return nil
}

// hostSlot waits for a host-bound slot for s (a host-bound step before it
// runs; an in-device step before host-bound work of its own, nvme-erase's
// overwrite fallback). The Placement check before a destructive step may
// be as old as the wait (minutes, behind long overwrites): one that had
// to wait asks Placement again once it holds a slot.
func (r *run) hostSlot(ctx context.Context, s *Step) (release func(), err error) {
	release, waited, err := r.e.hostBoundSlot(ctx)
	if err != nil {
		return nil, err
	}
	if *s.Destructive {
		if waited {
			r.cleared = time.Time{} // as old as the wait: ask again
		}
		// nvme-erase's overwrite fallback takes its slot inside the
		// attempt, after probing the drive: the all-clear must still be
		// young when the overwrite starts.
		if err := r.clearNow(ctx, s, ""); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}

// stepBackoffJitter is the spread, in percent either way, of the waits
// between a step's tries: devices that failed together do not all retry
// at the same instant.
const stepBackoffJitter = 20

// waits is the wait before each retry of a step: Retry.Backoff, doubled
// after each, jittered by stepBackoffJitter percent and never longer than
// Retry.MaxBackoff (the cap applies after the jitter).
func (rt Retry) waits() retry.Backoff {
	return retry.WithCappedDuration(rt.MaxBackoff, retry.WithJitterPercent(stepBackoffJitter, retry.NewExponential(rt.Backoff)))
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attempts runs the step up to Retry.Attempts times, each under the step's
// timeout, backing off (Retry.waits) between retryable failures; never
// after an attempt whose verification found the previous tenant's data
// (verificationFinding), whatever its code and Retry say. A
// destructive step asks Placement again before every retry: the first
// answer is as old as the attempts before it (hours, for a sanitize).
func (r *run) attempts(ctx context.Context, s *Step, rec *StepRecord, t *tries, impl stepImpl, dev *hardware.Device) (*plugins.Result, error) {
	waits := s.Retry.waits()
	var last error
	for {
		if *s.Destructive {
			done := ""
			if rec.Attempts > 0 {
				done = fmt.Sprintf("%d attempt(s) that failed (last: %s)", rec.Attempts, plugins.AsError(last).Msg)
				if err := r.placementClear(ctx, s, done); err != nil {
					return nil, err
				}
			}
			// The first attempt's all-clear came before the CHECK, a
			// bind, a checkpoint: it must still be young.
			if err := r.clearNow(ctx, s, done); err != nil {
				return nil, err
			}
			if err := r.keepClearGeneration(ctx, s, done); err != nil {
				return nil, err
			}
		}
		rec.Attempts++
		r.retried = rec.Attempts > 1 || r.startedBefore(rec.Index, s.Name)
		sctx, cancel := context.WithTimeout(ctx, s.Timeout)
		res, err := impl.exec(sctx, r, s, dev, r.progressFunc(ctx, s, rec.Index))
		t.ran(res, err)
		timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err == nil {
			return res, nil
		}
		if stop := (errStop{}); errors.As(err, &stop) {
			return nil, err // Placement refused the step's host-bound work: no retry
		}
		if timedOut {
			pe := *plugins.AsError(err)
			pe.Code, pe.Msg = plugins.CodeTimeout, fmt.Sprintf("step %s ran past its %s timeout: %s", s.Name, s.Timeout, pe.Msg)
			err = &pe
		}
		if why, found := verificationFinding(plugins.AsError(err).Details); found {
			// The previous tenant's data was read back: a retry could
			// only draw other samples, or ask the plugin again, until an
			// answer passes.
			return nil, r.tenantDataFound(s, err, why)
		}
		if ctx.Err() != nil || rec.Attempts >= s.Retry.Attempts || !s.retryable(plugins.CodeOf(err)) {
			return nil, err
		}
		last = err
		t.failed(err)
		backoff, _ := waits.Next() // never stops: the attempt count above ends the loop
		r.log.Warn("step failed, retrying", "step", s.Name, "attempt", rec.Attempts, "error", err, "backoff", backoff)
		if !r.e.sleep(ctx, backoff) {
			return nil, err
		}
	}
}

// progressFunc reports progress to metrics at once and to checkpoints at
// most every progressEvery (5 s), the first time that long into the step:
// each checkpoint is a committed write, and a step that ends sooner gets
// its final progress from its finish record. Steps may call it from
// several goroutines.
func (r *run) progressFunc(ctx context.Context, s *Step, index int) func(float64) {
	var mu sync.Mutex
	last := time.Now()
	return func(f float64) {
		mu.Lock()
		defer mu.Unlock()
		r.e.m.progress.WithLabelValues(string(r.t.Address), s.Name).Set(f)
		if time.Since(last) < r.e.progressEvery {
			return
		}
		last = time.Now()
		if err := r.e.cp.StepProgress(ctx, r.run.ID, index, f); err != nil {
			r.log.Debug("recording progress failed", "step", s.Name, "error", err)
		}
	}
}

// withDriver binds the device to s.Driver for the step when it is on
// another driver, re-discovers it, and binds it back to the pipeline's
// home driver afterwards, even when the step failed, and even when the
// device already was on s.Driver (an earlier run whose bind back failed,
// or a crash mid-step, leaves it there: skipping the restore would return
// it to the pool on the host's driver). A device that could not be bound
// back fails the step: it must not return to the pool on the wrong driver.
//
// One exception saves a bind cycle per step (each costs a driver probe):
// after a step that succeeded, when the next step wants the same driver,
// the device stays there (r.kept); settleDriver at the next step's start,
// and releaseKept at the end of the run whatever its outcome, bind it
// home when that step turns out not to use it.
func (r *run) withDriver(ctx context.Context, i int, s *Step, f func(*hardware.Device) (*plugins.Result, error)) (*plugins.Result, error) {
	if s.Driver == "" {
		return f(r.dev)
	}
	home := r.prof.Pipeline.HomeDriver
	var res *plugins.Result
	var err error
	if r.dev.Driver == s.Driver {
		res, err = f(r.dev)
	} else {
		res, err = r.onDriver(ctx, s, f)
	}
	if s.Driver == home {
		return res, err
	}
	if steps := r.prof.Pipeline.Steps; err == nil && i+1 < len(steps) && steps[i+1].Driver == s.Driver && r.dev.Driver == s.Driver {
		r.kept = true
		return res, nil
	}
	if rerr := r.restore(home); rerr != nil {
		if err == nil {
			return nil, rerr
		}
		return res, err
	}
	r.atHome()
	return res, err
}

// atHome records that the device is on its home driver again.
func (r *run) atHome() {
	r.kept = false
	d := *r.homeDev
	d.Driver = r.prof.Pipeline.HomeDriver
	r.dev = &d
}

// settleDriver binds a device kept on the previous step's driver home
// when step s does not run on that driver.
func (r *run) settleDriver(s *Step) error {
	if !r.kept || s.Driver == r.dev.Driver {
		return nil
	}
	if err := r.restore(r.prof.Pipeline.HomeDriver); err != nil {
		return errStop{VerdictRetryLater, fmt.Sprintf("device %s: binding it back to %s before step %s failed: %s; it stays reserved", r.t.Address, r.prof.Pipeline.HomeDriver, s.Name, plugins.AsError(err).Msg)}
	}
	r.atHome()
	return nil
}

// releaseKept binds home a device the run kept on a step's driver, when
// the run ends before the step that was to use it (failure, verdict,
// shutdown).
func (r *run) releaseKept() {
	if r.kept && r.restore(r.prof.Pipeline.HomeDriver) == nil {
		r.atHome()
	}
}

// homeDriverCheck runs at the end of a run whose pipeline has a step with
// a driver: it re-discovers the device and, when it is not on the home
// driver, binds it back once more. A device still elsewhere gets no clean
// verdict (a non-empty reason).
func (r *run) homeDriverCheck(ctx context.Context) string {
	home := r.prof.Pipeline.HomeDriver
	if !slices.ContainsFunc(r.prof.Pipeline.Steps, func(s Step) bool { return s.Driver != "" }) {
		return ""
	}
	dev, err := r.e.be.Discover(ctx, r.t.Address)
	if err != nil {
		return fmt.Sprintf("cannot check that %s is back on its home driver %s after the pipeline's driver steps: %v", r.t.Address, home, err)
	}
	if dev.Driver == home {
		return ""
	}
	r.log.Warn("device not on its home driver at the end of the run; binding it back", "driver", dev.Driver, "home", home)
	if err := r.restore(home); err == nil {
		if dev, err = r.e.be.Discover(ctx, r.t.Address); err == nil && dev.Driver == home {
			return ""
		}
	}
	cur := "unknown"
	if dev != nil {
		cur = dev.Driver
	}
	reason := fmt.Sprintf("device %s is on driver %q, not on its home driver %q, at the end of the run: it stays reserved; check why binding it to %s fails", r.t.Address, cur, home, home)
	r.log.Error("refusing a clean verdict: device not on its home driver", "driver", cur, "home", home)
	return reason
}

func (r *run) onDriver(ctx context.Context, s *Step, f func(*hardware.Device) (*plugins.Result, error)) (*plugins.Result, error) {
	// Taking the device from its driver starts on a young all-clear, as
	// a destructive attempt does (step asked Placement before recording
	// the step's start).
	if err := r.clearNow(ctx, s, ""); err != nil {
		return nil, err
	}
	if _, err := r.e.be.BindDriver(ctx, r.t.Address, s.Driver); err != nil {
		return nil, fmt.Errorf("binding %s to %s for step %s: %w", r.t.Address, s.Driver, s.Name, err)
	}
	dev, err := r.e.be.Discover(ctx, r.t.Address)
	if err != nil {
		return nil, fmt.Errorf("discovering %s after binding it to %s: %w", r.t.Address, s.Driver, err)
	}
	r.dev = dev // on the step's driver until restored (atHome)
	return f(dev)
}

// restore binds the device back to its home driver with a fresh context:
// it must happen even when the step's context was cancelled.
func (r *run) restore(home string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.e.be.BindDriver(ctx, r.t.Address, home); err != nil {
		r.log.Error("could not bind device back to its home driver", "driver", home, "error", err)
		return &plugins.Error{Code: plugins.CodeTryAgainLater, Msg: fmt.Sprintf("binding %s back to %s: %v", r.t.Address, home, err)}
	}
	return nil
}

// refusedBeforeActing reports a built-in's own "unsupported" answer, which
// built-ins give only before touching the device (after any driver
// binding, so they see what the step will see). An ErrUnsupported from
// the hardware mid-way (say the second namespace of a format) is not one:
// the device may be half wiped, so the step fails.
func refusedBeforeActing(impl stepImpl, err error) bool {
	if _, ok := impl.(builtinImpl); !ok || err == nil {
		return false
	}
	var pe *plugins.Error
	return errors.As(err, &pe) && pe.Code == plugins.CodeUnsupported
}

// ToolKey is the details key under which the engine records the tool a
// step ran, for a step that started an attempt: a built-in of this scour
// version, or a plugin's path and the SHA-256 of its file as the runner
// read it just before starting it (what an auditor needs to name the
// exact tool; absent when the runner did not report it).
const ToolKey = "tool"

// ExternalToolsKey is the details key under which the engine records the
// external tools a built-in step ran through the backend, name -> version
// ("" when the tool could not say).
const ExternalToolsKey = "external_tools"

// toolVersioner is the backend's optional answer to "which version of
// that tool ran": the real backend asks the tools, the simulator runs
// none.
type toolVersioner interface {
	ToolVersions(ctx context.Context, names []string) map[string]string
}

// externalTools names the tools built-in step s runs, with their versions
// where the backend knows them.
func (r *run) externalTools(ctx context.Context, s *Step) map[string]any {
	if s.Type == TypePlugin {
		return nil
	}
	spec, _ := lookupBuiltin(s.Type)
	tv, ok := r.e.be.(toolVersioner)
	if !ok || len(spec.Tools) == 0 {
		return nil
	}
	vers := tv.ToolVersions(ctx, spec.Tools)
	out := make(map[string]any, len(spec.Tools))
	for _, n := range spec.Tools {
		out[n] = vers[n]
	}
	return out
}

func toolOf(s *Step, t *tries) map[string]any {
	if s.Type != TypePlugin {
		return map[string]any{"name": "scour built-in " + s.Type, "version": version.Version}
	}
	tool := map[string]any{"name": "plugin", "path": s.Path}
	if t.sha256 != "" {
		tool["sha256"] = t.sha256
	}
	return tool
}

// startedBefore reports whether the run's stored records (from before a
// restart resumed it) show step i, name, started and not done: an
// attempt of it ran already, whatever it did to the device.
func (r *run) startedBefore(i int, name string) bool {
	for _, rec := range r.prior {
		if rec.RunID == r.run.ID && rec.Index == i && rec.Name == name {
			return true
		}
	}
	return false
}
