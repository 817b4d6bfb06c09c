package pipeline

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// run is one execution of a profile's pipeline on one device.
type run struct {
	e    *Engine
	t    Target
	dev  *hardware.Device
	prof *Profile
	log  *slog.Logger

	run  Run
	recs []StepRecord
	// prior are the step records the store held for the run when it was
	// opened (a resumed run's, from before the restart); retried is set
	// before each attempt of a step: an earlier attempt of it ran, in
	// this process or before the restart (startedBefore).
	prior   []StepRecord
	retried bool
	def     string // definition(&prof.Pipeline)

	// serial, model and firmware: the best identity known, from the
	// first discovery or from a step's driver (learnIdentity);
	// serialSource is where serial came from (hardware.SerialFromVPD or
	// "" for the driver).
	serial, model, firmware string
	serialSource            string
	// homeDev is the device as discovered at the start; kept says the
	// device stays on the last step's driver for the next step.
	homeDev *hardware.Device
	kept    bool
	// retiring marks an operator's retirement run (Engine.Retire).
	retiring retireMode
	// cleared is how old Placement's last all-clear for the device is:
	// when the request it came from began (placementClear). A driver
	// unbind or a destructive attempt starts only while it is younger
	// than placementAnswerMaxAge (clearNow).
	cleared time.Time
}

// errStop ends a run with a verdict before a step touched the device
// (allocation found, or Placement could not be asked).
type errStop struct {
	verdict Verdict
	reason  string
}

func (a errStop) Error() string { return a.reason }

func (r *run) start() RunStart {
	p := r.prof.Pipeline
	names := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		names[i] = s.Name
	}
	if r.retiring != retireNone {
		// A retirement run plans its wipe alone: a cleaning run of the
		// pipeline never resumes it, nor it a cleaning run.
		names = []string{r.retireWipeName()}
	}
	rs := RunStart{Device: string(r.t.Address), RPUUID: r.t.RPUUID, Profile: r.prof.Name,
		Pipeline: p.Name, PipelineVersion: p.Version, Steps: names, Started: time.Now().UTC(), Category: p.Category, Trigger: r.t.Trigger}
	if r.dev != nil {
		rs.Serial, rs.Model, rs.Vendor, rs.Firmware, rs.Kind = r.dev.Serial, r.dev.Model, r.dev.VendorID, r.dev.Firmware, string(r.dev.Kind)
		rs.SerialSource = r.dev.SerialSource
		r.serial, r.model, r.firmware, r.serialSource = r.dev.Serial, r.dev.Model, r.dev.Firmware, r.dev.SerialSource
	}
	return rs
}

// capacity sums the sizes of the device's media (0 when the backend
// cannot list them), for the record.
func (r *run) capacity(ctx context.Context) int64 {
	media, err := r.e.be.Media(ctx, r.t.Address)
	if err != nil {
		return 0
	}
	var n int64
	for _, m := range media {
		n += m.Size
	}
	return n
}

// DefinitionKey is the key of StepRecord.Details under which the engine
// stores the hash of the pipeline's step definitions the step ran under.
const DefinitionKey = "scour_pipeline_definition"

// definition hashes what decides whether a step's recorded outcome still
// counts: every step's name, type, path, args, driver, destructive,
// required, verifies, requires and on_unsupported, and the home driver.
// Editing a step without bumping the pipeline version changes it. A step
// that does not verify hashes as before verifies was hashed (runs open
// across an upgrade resume). The pipeline's category is compared by open.
func definition(p *Pipeline) string {
	type stepDef struct {
		Name, Type, Path, Driver, OnUnsupported string
		Args                                    map[string]any
		Requires                                Requires
		Destructive, Required                   bool
		Verifies                                bool `json:",omitempty"`
	}
	def := func(s Step) stepDef {
		return stepDef{Name: s.Name, Type: s.Type, Path: s.Path, Driver: s.Driver, OnUnsupported: s.OnUnsupported,
			Args: s.Args, Requires: s.Requires, Destructive: s.Destructive != nil && *s.Destructive, Required: s.Required == nil || *s.Required,
			Verifies: s.Verifies}
	}
	defs := make([]stepDef, len(p.Steps))
	for i, s := range p.Steps {
		defs[i] = def(s)
	}
	// A configured retirement wipe counts too; without one the hash is
	// what it was before retire_wipe existed (runs open across an
	// upgrade resume).
	var wipe *stepDef
	if p.RetireWipe != nil {
		w := def(*p.RetireWipe)
		wipe = &w
	}
	b, err := json.Marshal(struct {
		HomeDriver string
		Steps      []stepDef
		RetireWipe *stepDef `json:",omitempty"`
	}{p.HomeDriver, defs, wipe})
	if err != nil { // args that cannot be encoded: never equal to a stored hash
		return "unhashable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sameDefinition reports whether every done record of the open run was
// made under the current step definitions (the hash stamped into its
// Details). A done record without one (or with another) may stem from a
// step that has since changed type, args or driver: it must not count.
func sameDefinition(recs []StepRecord, def string) bool {
	for _, rec := range recs {
		if rec.done() && rec.Details[DefinitionKey] != def {
			return false
		}
	}
	return true
}

// otherDrive reports whether two serials both known, and from the same
// source (VPD, or the driver's Identify Controller), name different
// drives: the drive in a slot (same PCI address) was replaced. Serials
// from different sources prove nothing: a drive's VPD "SN" and its
// Identify Controller serial may differ beyond the space padding
// (trimmed here), and such a pair must not stop or supersede a run.
func otherDrive(was, wasSource, now, nowSource string) bool {
	was, now = strings.TrimSpace(was), strings.TrimSpace(now)
	return was != "" && now != "" && wasSource == nowSource && was != now
}

// mayBeOtherDrive is the resume-time check across sources: the run's
// serial came from the driver (a step bound to nvme) and a fresh scourd
// sees only the VPD serial (the drive on vfio-pci), or the other way
// round. Serials that agree once spaces, dashes and case are set aside
// are the same drive; any other pair may be a drive swapped while scourd
// was down, and when no step bound to nvme is left to look again, nothing
// else would notice: the run starts over (safe, if wasteful for a drive
// whose VPD and controller serials differ).
func mayBeOtherDrive(was, wasSource, now, nowSource string) bool {
	loose := func(s string) string {
		return strings.ToUpper(strings.NewReplacer(" ", "", "-", "", "_", "").Replace(s))
	}
	was, now = loose(was), loose(now)
	return was != "" && now != "" && wasSource != nowSource && was != now
}

// open resumes the device's open run when it belongs to the same pipeline
// (name, version, category, steps and step definitions), as far as
// discovery tells now the same drive (serial), and nothing moved the
// device's Placement generation since its destructive steps (movedSince),
// else closes it as superseded and opens anew. The category is the run's:
// the claims store judges the verdict by the one stored when the run
// opened, so a run opened under another (weaker) category must not be
// resumed, even with no step done yet.
func (r *run) open(ctx context.Context) ([]StepRecord, error) {
	want := r.start()
	want.CapacityBytes = r.capacity(ctx)
	for range 2 {
		run, recs, err := r.e.cp.OpenRun(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("device %s: opening a cleaning run: %w", r.t.Address, err)
		}
		s := run.Start
		sameSteps := sameDefinition(recs, r.def)
		swapped := otherDrive(s.Serial, s.SerialSource, want.Serial, want.SerialSource) ||
			mayBeOtherDrive(s.Serial, s.SerialSource, want.Serial, want.SerialSource)
		sameCategory := s.Category == want.Category
		same := s.Pipeline == want.Pipeline && s.PipelineVersion == want.PipelineVersion && s.Profile == want.Profile && slices.Equal(s.Steps, want.Steps) && sameSteps && sameCategory && !swapped
		moved := ""
		if same {
			if moved, err = r.movedSince(ctx, run, recs); err != nil {
				return nil, err
			}
		}
		if same && moved == "" {
			r.run = run
			if r.serial == "" || (r.serialSource == hardware.SerialFromVPD && s.Serial != "" && s.SerialSource != hardware.SerialFromVPD) {
				// Unknown on the home driver now (an NVMe on vfio-pci), or
				// only its VPD serial: the run's own serial (from the
				// driver, when a step bound to nvme learned it) is what a
				// step's driver must show again (learnIdentity).
				r.serial, r.serialSource, r.model = s.Serial, s.SerialSource, cmp.Or(s.Model, r.model)
			}
			if r.firmware == "" {
				r.firmware = s.Firmware
			}
			if len(recs) > 0 {
				r.log.Info("resuming interrupted cleaning run", "run", run.ID, "attempt", run.Attempt)
			}
			return recs, nil
		}
		sup := Result{Verdict: VerdictRetryLater, RunID: run.ID, Device: string(r.t.Address), Serial: s.Serial, Model: s.Model,
			Reason: fmt.Sprintf("superseded: config now says %s v%d", want.Pipeline, want.PipelineVersion)}
		if !sameSteps {
			sup.Reason += " with other step definitions (type, path, args, driver, destructive, required, verifies changed without a version bump)"
		}
		if !sameCategory {
			sup.Reason += fmt.Sprintf(" with category %q, not %q as when this run opened", want.Category, s.Category)
		}
		if moved != "" {
			sup.Reason = "superseded: " + moved + "; nothing this run did counts, and a new run starts from the first step"
		}
		if swapped {
			sup.Reason = fmt.Sprintf("superseded: the device at %s now reports serial %q, not %q as when this run opened: the drive in the slot was replaced, and nothing this run did counts for the new one; a new run starts from the first step",
				r.t.Address, want.Serial, s.Serial)
		}
		if err := r.e.cp.FinishRun(ctx, run.ID, sup); err != nil {
			return nil, fmt.Errorf("device %s: closing superseded run %s: %w", r.t.Address, run.ID, err)
		}
		if moved != "" {
			r.log.Warn("not resuming an interrupted cleaning run: the device may have been used since its destructive steps; starting over", "run", run.ID, "reason", moved)
			continue
		}
		r.log.Warn("closed an interrupted run of an older pipeline or another drive; starting over", "run", run.ID, "was", s.Pipeline, "version", s.PipelineVersion,
			"same_step_definitions", sameSteps, "same_category", sameCategory, "serial", want.Serial, "run_serial", s.Serial)
	}
	return nil, fmt.Errorf("device %s: checkpoint store keeps returning a run of another pipeline or drive", r.t.Address)
}

func (r *run) execute(ctx context.Context) (*Result, error) {
	r.homeDev = r.dev
	defer r.releaseKept()
	prior, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	r.prior = prior
	res := &Result{RunID: r.run.ID, Device: string(r.t.Address), Profile: r.prof.Name,
		Pipeline: fmt.Sprintf("%s v%d", r.prof.Pipeline.Name, r.prof.Pipeline.Version), Attempt: r.run.Attempt}
	if r.retiring != retireNone {
		return r.retireByOperator(ctx, prior, res)
	}
	for i := range r.prof.Pipeline.Steps {
		s := &r.prof.Pipeline.Steps[i]
		if rec, ok := doneIn(prior, r.run.ID, i, s.Name); ok {
			r.recs = append(r.recs, rec)
			continue
		}
		rec, err := r.step(ctx, i, s)
		if ctx.Err() != nil {
			// Shutdown: leave the run open so the next start resumes it.
			return nil, fmt.Errorf("device %s: run %s interrupted at step %s: %w", r.t.Address, r.run.ID, s.Name, context.Cause(ctx))
		}
		var stop errStop
		if errors.As(err, &stop) {
			res.Verdict, res.Step, res.Reason = stop.verdict, s.Name, stop.reason
			res.Steps, res.Serial, res.Model = r.recs, r.serial, r.model
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		r.recs = append(r.recs, rec)
		// An optional step's failure lets the run go on, except a
		// verification that did not pass and a retire (code 13): the step
		// says the device must leave service, whether or not its cleaning
		// needed it.
		if rec.State != StepFailed || (!*s.Required && rec.Code != plugins.CodeRetire && !verificationRefused(rec, s.verifies())) {
			continue
		}
		res.Step, res.Code = s.Name, rec.Code
		res.Verdict, res.Reason = r.verdictFor(s, rec)
		if rec.Code == plugins.CodeRetire {
			if err := r.retire(ctx, prior, "step "+s.Name, res); err != nil {
				return nil, err
			}
		}
		res.Steps, res.Serial, res.Model = r.recs, r.serial, r.model
		return res, nil
	}
	res.Steps = r.recs
	res.Serial, res.Model = r.serial, r.model
	if why := r.homeDriverCheck(ctx); why != "" {
		res.Verdict, res.Code, res.Reason = VerdictRetryLater, plugins.CodeTryAgainLater, why
		return res, nil
	}
	if step, why := r.unverified(); why != "" {
		r.log.Error("refusing a clean verdict: a step's verification does not pass", "step", step, "reason", why)
		res.Verdict, res.Step, res.Code, res.Reason = VerdictQuarantine, step, plugins.CodePermanent, why
		return res, nil
	}
	if step, code, verdict, why := r.unerased(); why != "" {
		r.log.Error("refusing a clean verdict: no step erased the device in this run", "step", step, "reason", why)
		res.Verdict, res.Step, res.Code, res.Reason = verdict, step, code, why
		return res, nil
	}
	res.Verdict = VerdictClean
	return res, nil
}

// unerased refuses a clean verdict to a run in which no erasing step
// (Step.erases) succeeded, unless its pipeline says category no-erase:
// every erasing step optional and failed, or skipped (on_unsupported:
// skip on a device without the capability), leaves the last tenant's data
// where it was. Validate makes sure a pipeline has an erasing step; this
// makes sure one ran. The claims store refuses a clear or purge run
// without a technique besides (checkClean); this covers a pipeline with
// no category too. The verdict follows the last erasing step's failure
// (retry-later while it is retryable and the run budget lasts), and is
// quarantine when every erasing step was skipped: this pipeline cannot
// erase the device. A no-erase run on a device discovered as a kind that
// holds tenant data (tenantDataKinds: Validate refuses no-erase only on a
// profile that names the kind, and one may match by resource or PCI
// class) is quarantined, permanently: it erased nothing, by design.
func (r *run) unerased() (step string, code int, verdict Verdict, why string) {
	if r.prof.Pipeline.Category == CategoryNoErase {
		if dev := cmp.Or(r.homeDev, r.dev); dev == nil {
			return "", plugins.CodeTryAgainLater, VerdictRetryLater, fmt.Sprintf("refusing a clean verdict; device %s stays reserved: profile %s's pipeline %s says category %s, but the device's kind is not known in this run (no discovery), so it may hold tenant data; it is retried",
				r.t.Address, r.prof.Name, r.prof.Pipeline.Name, CategoryNoErase)
		} else if slices.Contains(tenantDataKinds, dev.Kind) {
			return "", plugins.CodePermanent, VerdictQuarantine, fmt.Sprintf("refusing a clean verdict; device %s stays reserved: it is %s, a kind of device that holds tenant data, but profile %s's pipeline %s says category %s and erased nothing, so it may still hold the previous tenant's data. %s: give this device a profile whose pipeline erases it, then release it with scourctl placement unquarantine",
				r.t.Address, aKind(dev.Kind), r.prof.Name, r.prof.Pipeline.Name, CategoryNoErase, noEraseFor)
		}
		return "", 0, "", ""
	}
	steps := r.prof.Pipeline.Steps
	var last *StepRecord
	var names []string
	for i := range r.recs {
		rec := &r.recs[i]
		if rec.Index >= len(steps) || !steps[rec.Index].erases() {
			continue
		}
		if rec.State == StepSucceeded {
			return "", 0, "", ""
		}
		names = append(names, fmt.Sprintf("%s (%s)", rec.Name, rec.State))
		if rec.State == StepFailed {
			last = rec
		}
	}
	if len(names) == 0 {
		return "", 0, "", "" // Validate refuses such a pipeline; nothing to name
	}
	tail := fmt.Sprintf("; device %s stays reserved: no erasing step succeeded in this run (%s), so it may still hold the previous tenant's data", r.t.Address, strings.Join(names, ", "))
	if last == nil {
		return names[0], plugins.CodePermanent, VerdictQuarantine,
			"refusing a clean verdict" + tail + ": every erasing step was skipped, so this pipeline cannot erase this device; give it a pipeline that can (or make the step required), then release it with scourctl placement unquarantine"
	}
	s := &steps[last.Index]
	verdict, why = r.verdictFor(s, *last)
	return last.Name, last.Code, verdict, "refusing a clean verdict" + tail + ": " + why
}

// doneIn finds a finished record of step i in this very run.
func doneIn(prior []StepRecord, runID string, i int, name string) (StepRecord, bool) {
	for _, rec := range prior {
		if rec.RunID == runID && rec.Index == i && rec.Name == name && rec.done() {
			return rec, true
		}
	}
	return StepRecord{}, false
}

// deploymentCodes are failures of scour's own configuration or of a
// plugin's installation (file missing, wrong owner or mode, no common
// protocol version, cannot start, bad args or request), not of the device:
// quarantining for them would let one bad package push quarantine every
// dirty device of a fleet.
var deploymentCodes = []int{plugins.CodeIncompatibleVersion, plugins.CodeInvalidConfig, plugins.CodeInvalidRequest}

// verdictFor turns a required step's failure into a verdict. A failure
// whose verification found the previous tenant's data (verificationFinding)
// is quarantine, whatever retryable_codes and the run budget say.
func (r *run) verdictFor(s *Step, rec StepRecord) (Verdict, string) {
	msg := fmt.Sprintf("step %s failed: %s", s.Name, rec.Message)
	why, found := verificationFinding(rec.Details)
	switch {
	case found && rec.Code != plugins.CodeRetire:
		// Whatever retryable_codes list (a 12 among them): a later run
		// would only verify again until a sample misses the data.
		return VerdictQuarantine, fmt.Sprintf("%s (%s: permanent, never retried; fix the erase, then release the device with scourctl placement unquarantine)", msg, why)
	case slices.Contains(deploymentCodes, rec.Code):
		what := "the step's configuration"
		if s.Type == TypePlugin {
			what = "plugin " + s.Path + " (its file, owner root, mode without group/world write (chmod go-w), protocol version, args)"
		}
		r.log.Error("cleaning blocked by a configuration or deployment problem: fix it; the device stays reserved and is retried",
			"step", s.Name, "plugin", s.Path, "code", rec.Code, "error", rec.Message)
		return VerdictRetryLater, fmt.Sprintf("%s (configuration or deployment problem, not the device's: fix %s; the device stays reserved and is retried)", msg, what)
	case rec.Code == plugins.CodeRetire:
		return VerdictQuarantine, msg + " (device must be retired)"
	case !s.retryable(rec.Code):
		return VerdictQuarantine, msg + " (permanent failure: fix the cause, then release the device with scourctl)"
	case r.run.Attempt >= r.prof.Pipeline.MaxRuns:
		return VerdictQuarantine, fmt.Sprintf("%s (run %d of %d: retry budget exhausted)", msg, r.run.Attempt, r.prof.Pipeline.MaxRuns)
	default:
		return VerdictRetryLater, fmt.Sprintf("%s (run %d of %d; will retry)", msg, r.run.Attempt, r.prof.Pipeline.MaxRuns)
	}
}

func (s *Step) retryable(code int) bool { return slices.Contains(s.Retry.RetryableCodes, code) }
