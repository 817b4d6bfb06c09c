package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/builtin"
)

// ParseConfig decodes a pipelines config document (unknown keys are
// errors), applies defaults and validates it.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && err != io.EOF {
		return c, fmt.Errorf("pipelines config: %w", err)
	}
	c.setDefaults()
	return c, c.Validate()
}

// Plan is what a run would do for a device, and why.
type Plan struct {
	Device   *hardware.Device
	Target   Target
	Profile  string
	Pipeline string
	Version  int
	// Category is what the pipeline claims (clear, purge, no-erase or "").
	Category string
	// NotMatched says why each profile before the chosen one did not
	// match (all of them when Profile is empty).
	NotMatched []string
	Steps      []PlannedStep
	// RetireWipe is the retirement wipe a run would do before its
	// quarantine verdict if a required step said retire (code 13; see
	// docs/pipelines.md, Retirement): nil when none would, and then
	// NoRetireWipe says why (the device would be retired unwiped).
	RetireWipe   *PlannedRetireWipe
	NoRetireWipe string
}

// PlannedRetireWipe is a Plan's retirement wipe: planned as a step (its
// Action other than "run" means it would not erase the device, which
// would then be retired unwiped), with its args and where it comes from.
type PlannedRetireWipe struct {
	PlannedStep
	Args map[string]any
	// Configured: the pipeline's retire_wipe; otherwise the default for
	// the device's kind.
	Configured bool
}

// PlannedStep is one step of a Plan.
type PlannedStep struct {
	Name        string
	Type        string
	Action      string // "run", "skip" or "fail" (the run would stop here)
	Why         string
	Destructive bool
	Required    bool
	Verifies    bool
	// Erases: the step counts as the pipeline's erase (Step.erases);
	// Technique: one that reports the technique it applied, as a clear
	// or purge run needs (Step.reportsTechnique).
	Erases    bool
	Technique bool
	Does      string
	// Warnings say why the step cannot succeed on the device as it is
	// bound now, or what the plan cannot know before the step binds
	// another driver.
	Warnings []string
}

// Plan says what Clean would do for t without touching the device: it
// discovers it (read-only), matches a profile and evaluates every step's
// requirements. Plugins' CHECK is not run; it decides at run time.
func (e *Engine) Plan(ctx context.Context, t Target) (*Plan, error) {
	dev, err := e.be.Discover(ctx, t.Address)
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", t.Address, err)
	}
	prof, why := e.cfg.match(t, dev)
	p := &Plan{Device: dev, Target: t, NotMatched: why}
	if prof == nil {
		if name := e.cfg.lookProfile(t, dev); name != "" {
			p.NotMatched = append(p.NotMatched, fmt.Sprintf("WARNING: profile %s requires capabilities unknown while bound to %q; a run binds the device to nvme for a moment (after the Placement check) to read them, then decides", name, dev.Driver))
		}
		return p, nil
	}
	p.Profile, p.Pipeline, p.Version, p.Category = prof.Name, prof.Pipeline.Name, prof.Pipeline.Version, prof.Pipeline.Category
	var prior *builtin.Erasure // what the erase steps so far would leave
	priorKnown := true
	for i := range prof.Pipeline.Steps {
		s := &prof.Pipeline.Steps[i]
		ps := planStep(s, dev, prof.Pipeline.HomeDriver, prior, priorKnown)
		if spec, ok := lookupBuiltin(s.Type); ok && ps.Action == "run" && builtin.Erases(spec.Name) {
			prior, priorKnown = builtin.PredictErasure(spec.Name, s.Args, dev)
		} else if s.Type == TypePlugin && ps.Action == "run" && *s.Destructive {
			prior, priorKnown = nil, false // a plugin may erase: unknown how
		}
		p.Steps = append(p.Steps, ps)
	}
	if ws, none := retireWipeFor(&prof.Pipeline, dev); ws != nil {
		p.RetireWipe = &PlannedRetireWipe{PlannedStep: planStep(ws, dev, prof.Pipeline.HomeDriver, nil, true),
			Args: ws.Args, Configured: prof.Pipeline.RetireWipe != nil}
	} else {
		p.NoRetireWipe = none
	}
	return p, nil
}

// Write prints the plan for an operator.
func (p *Plan) Write(w io.Writer) {
	d := p.Device
	fmt.Fprintf(w, "device %s: kind %s, %s:%s, class %s, driver %q, resource class %q\n",
		d.Address, d.Kind, d.VendorID, d.DeviceID, d.Class, d.Driver, p.Target.ResourceClass)
	for _, n := range p.NotMatched {
		fmt.Fprintf(w, "  not matched: %s\n", n)
	}
	if p.Profile == "" {
		fmt.Fprintf(w, "verdict would be %s: no profile matches; the device stays reserved\n", VerdictNoProfile)
		return
	}
	fmt.Fprintf(w, "profile %s -> pipeline %s v%d\n", p.Profile, p.Pipeline, p.Version)
	switch p.Category {
	case CategoryPurge:
		fmt.Fprintf(w, "category purge: the record is returned only if a verifying step passes in the run, after an erasing step that succeeded (not skipped)\n")
	case CategoryClear:
		fmt.Fprintf(w, "category clear: the record is returned only if an erasing step that reports its technique succeeded in the run (not skipped, not failed)\n")
	case CategoryNoErase:
		fmt.Fprintf(w, "category no-erase: the pipeline erases nothing (a device that holds no tenant data); its records say so\n")
	case "":
		if slices.ContainsFunc(p.Steps, func(s PlannedStep) bool { return s.Technique }) {
			fmt.Fprintf(w, "category: none claimed (clear or purge may be claimed; purge needs a verifying step)\n")
		} else {
			fmt.Fprintf(w, "category: none claimed (right for this pipeline: no step reports the technique it applied, %s report none, so clear or purge would be refused)\n", strings.Join(otherErasingBuiltins, ", "))
		}
	default:
		fmt.Fprintf(w, "category %s\n", p.Category)
	}
	for i, s := range p.Steps {
		writeStep(w, strconv.Itoa(i+1), s)
		if s.Action == "fail" {
			fmt.Fprintf(w, "  the run would stop here and the device would be quarantined\n")
			p.writeRetireWipe(w)
			return
		}
	}
	p.writeUnerased(w)
	p.writeRetireWipe(w)
}

// writeUnerased predicts the verdicts of a run that would erase nothing
// (run.unerased, the claims store's checkClean): every erasing step
// planned skip (the device lacks what they need), every one reporting a
// technique skipped in a clear or purge pipeline, or a no-erase pipeline
// on a device that holds tenant data. Plugins' CHECK decides at run time:
// a plugin step planned to run may still skip.
func (p *Plan) writeUnerased(w io.Writer) {
	var erasing, technique []string
	erases, tells := false, false
	for _, s := range p.Steps {
		if s.Erases {
			erasing = append(erasing, fmt.Sprintf("%s (%s)", s.Name, s.Action))
			erases = erases || s.Action == "run"
		}
		if s.Technique {
			technique = append(technique, fmt.Sprintf("%s (%s)", s.Name, s.Action))
			tells = tells || s.Action == "run"
		}
	}
	switch {
	case p.Category == CategoryNoErase:
		if slices.Contains(tenantDataKinds, p.Device.Kind) {
			fmt.Fprintf(w, "verdict would be %s: the pipeline erases nothing (category %s), and %s holds tenant data; %s\n", VerdictQuarantine, CategoryNoErase, aKind(p.Device.Kind), noEraseFor)
		}
	case len(erasing) > 0 && !erases:
		fmt.Fprintf(w, "verdict would be %s: no erasing step would run (%s), so the run erases nothing and is refused the clean verdict; this pipeline cannot erase this device\n", VerdictQuarantine, strings.Join(erasing, ", "))
	case (p.Category == CategoryClear || p.Category == CategoryPurge) && len(technique) > 0 && !tells:
		fmt.Fprintf(w, "verdict would be %s: no erasing step that reports the technique it applied would run (%s), so the claims store refuses a %s record the clean verdict\n", VerdictQuarantine, strings.Join(technique, ", "), p.Category)
	}
}

// writeStep prints planned step s, numbered n.
func writeStep(w io.Writer, n string, s PlannedStep) {
	flags := []string{}
	if s.Destructive {
		flags = append(flags, "destructive: Placement allocation check first")
	}
	if !s.Required {
		flags = append(flags, "optional")
	}
	if s.Verifies {
		flags = append(flags, "verifies: listed under the record's verification")
	}
	fmt.Fprintf(w, "  %s. %-4s %s (%s): %s", n, strings.ToUpper(s.Action), s.Name, s.Type, s.Why)
	if len(flags) > 0 {
		fmt.Fprintf(w, " [%s]", strings.Join(flags, "; "))
	}
	fmt.Fprintf(w, "\n       %s\n", s.Does)
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "       WARNING: %s\n", warn)
	}
}

// writeRetireWipe prints what a step saying retire (code 13) would lead
// to: the retirement wipe, or that the device would be retired unwiped.
func (p *Plan) writeRetireWipe(w io.Writer) {
	rw := p.RetireWipe
	if rw == nil {
		fmt.Fprintf(w, "if a step says retire (code 13): %s; the device would be RETIRED UNWIPED (it may still hold the last tenant's data)\n", p.NoRetireWipe)
		return
	}
	from := "the pipeline's retire_wipe"
	if !rw.Configured {
		from = fmt.Sprintf("no retire_wipe configured: the default for a device of kind %s", p.Device.Kind)
	}
	fmt.Fprintf(w, "if a step says retire (code 13), the run ends and this retirement wipe runs before the quarantine verdict (%s):\n", from)
	writeStep(w, "R", rw.PlannedStep)
	fmt.Fprintf(w, "       args: %s\n", formatArgs(rw.Args))
	fmt.Fprintf(w, "       then read back (step %s, verify: 64 sampled blocks compared with what the wipe promises; media found not erased: RETIRED UNWIPED)\n", RetireReadBackName)
	if rw.Action != "run" {
		fmt.Fprintf(w, "  the wipe would not run: the device would be RETIRED UNWIPED (it may still hold the last tenant's data)\n")
	}
}

// formatArgs prints a step's args in key order, "none" when it has none.
func formatArgs(args map[string]any) string {
	if len(args) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		parts = append(parts, fmt.Sprintf("%s: %v", k, args[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// planStep decides what Clean would do with step s of a device as
// discovered now (dev), given what the erase steps before it would leave
// (prior, or priorKnown false when that cannot be told), and warns about
// whatever keeps it from succeeding on the device as it is bound now.
// It reads no flags and prints nothing: every CLI shape can use it.
func planStep(s *Step, dev *hardware.Device, home string, prior *builtin.Erasure, priorKnown bool) PlannedStep {
	ps := PlannedStep{Name: s.Name, Type: s.Type, Action: "run", Destructive: *s.Destructive, Required: *s.Required, Verifies: s.verifies(),
		Erases: s.erases(), Technique: s.reportsTechnique()}
	spec, isBuiltin := lookupBuiltin(s.Type)
	if isBuiltin {
		ps.Does = spec.Does
	} else {
		ps.Does = fmt.Sprintf("%s (CLEAN; CHECK decides support at run time)", s.Path)
	}
	driver := dev.Driver // the driver the step runs on
	rebinds := s.Driver != "" && s.Driver != dev.Driver
	if rebinds {
		driver = s.Driver
		ps.Does += fmt.Sprintf(" [binds %s for the step, then back to %s]", s.Driver, home)
	}
	if isBuiltin && spec.Skip != nil {
		if why, _ := spec.Skip(s.Args, prior); why != "" {
			ps.Action, ps.Why = "skip", why
			return ps
		}
		if !priorKnown {
			ps.Warnings = append(ps.Warnings, "which erase technique runs before it cannot be told before the device is bound to nvme: it compares with zeros after a user-data erase, and after a crypto erase checks that the blocks sampled before it changed")
		}
	}
	req, err := ParseRequirements(s.Requires)
	if err != nil {
		ps.Action, ps.Why = "fail", err.Error()
		return ps
	}
	ok, unmet := req.Match(dev.Capabilities)
	remembered := dev.NVMe != nil && dev.NVMe.Remembered
	unknown := unknownRequirement(s, dev)
	switch {
	case rebinds && ((!ok && !remembered) || unknown != nil):
		// Requirements are evaluated on the device as bound for the step.
		said := strings.Join(unmet, "; ")
		if said == "" {
			said = "required capabilities unknown there"
		}
		ps.Why = fmt.Sprintf("requirements decided once bound to %s (bound to %q now: %s)", s.Driver, dev.Driver, said)
		ps.Warnings = append(ps.Warnings, fmt.Sprintf("cannot tell before binding %s whether the device meets %v: on %q its capabilities are unknown; if unmet there the step will %s, and if discovery cannot read them there either the step fails, try again later", s.Driver, map[string]any(s.Requires), dev.Driver, s.OnUnsupported))
	case unknown != nil:
		// Neither met nor unmet: on_unsupported does not apply.
		ps.Action, ps.Why = "fail", plugins.AsError(unknown).Msg
	case !ok:
		ps.Action, ps.Why = s.OnUnsupported, "requirements unmet: "+strings.Join(unmet, "; ")
		if remembered {
			ps.Why += " (NVMe facts as last seen bound to nvme)"
		}
	case len(s.Requires) == 0:
		ps.Why = "no requirements"
	default:
		ps.Why = "requirements met"
	}
	if ps.Action != "run" {
		return ps
	}
	if isBuiltin {
		ps.Warnings = append(ps.Warnings, builtinWarnings(spec, s, dev, driver)...)
	}
	return ps
}

// builtinWarnings says why a built-in step cannot succeed on dev when it
// runs on driver.
func builtinWarnings(spec builtin.Spec, s *Step, dev *hardware.Device, driver string) []string {
	var out []string
	if need, ok := spec.Needs[dev.Kind]; ok && need != driver {
		out = append(out, fmt.Sprintf("cannot succeed: %s is bound to %q and the step runs there; it needs the %s driver: give the step driver: %s", dev.Address, driver, need, need))
	}
	switch spec.Name {
	case "pci-reset":
		if !dev.ResetAvailable {
			out = append(out, fmt.Sprintf("cannot succeed: %s has no sysfs reset file (no reset method the kernel can use)", dev.Address))
		}
	case "firmware-flash":
		how, _ := s.Args["activate"].(string)
		switch {
		case dev.Kind != hardware.KindNIC && dev.Kind != hardware.KindNVMe:
			out = append(out, fmt.Sprintf("cannot succeed: %s is a %s device: no firmware flashing", dev.Address, dev.Kind))
		case dev.Kind == hardware.KindNVMe && how != "reset":
			out = append(out, "cannot succeed: devlink fw_activate does not apply to NVMe: give the step args.activate: reset")
		case dev.Kind == hardware.KindNIC && dev.NIC != nil && len(dev.NIC.Firmware) == 0:
			out = append(out, fmt.Sprintf("cannot succeed: devlink reports no firmware versions for %s (%s), so none can be compared after flashing", dev.Address, dev.Absent[hardware.NICFirmwarePrefix+"*"]))
		}
	}
	return out
}
