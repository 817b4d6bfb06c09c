package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
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
	// Category is what the pipeline claims (clear, purge or "").
	Category string
	// NotMatched says why each profile before the chosen one did not
	// match (all of them when Profile is empty).
	NotMatched []string
	Steps      []PlannedStep
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
	Does        string
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
		return p, nil
	}
	p.Profile, p.Pipeline, p.Version, p.Category = prof.Name, prof.Pipeline.Name, prof.Pipeline.Version, prof.Pipeline.Category
	for _, s := range prof.Pipeline.Steps {
		ps := PlannedStep{Name: s.Name, Type: s.Type, Action: "run", Destructive: *s.Destructive, Required: *s.Required, Verifies: s.verifies()}
		if spec, ok := lookupBuiltin(s.Type); ok {
			ps.Does = spec.Does
		} else {
			ps.Does = fmt.Sprintf("%s (CLEAN; CHECK decides support at run time)", s.Path)
		}
		req, err := ParseRequirements(s.Requires)
		var unmet []string
		ok := err == nil
		if ok {
			ok, unmet = req.Match(dev.Capabilities)
		}
		switch {
		case err != nil:
			ps.Action, ps.Why = "fail", err.Error()
		case !ok:
			ps.Action, ps.Why = s.OnUnsupported, "requirements unmet: "+strings.Join(unmet, "; ")
		default:
			ps.Why = "requirements met"
			if len(s.Requires) == 0 {
				ps.Why = "no requirements"
			}
		}
		if s.Driver != "" && s.Driver != dev.Driver {
			ps.Does += fmt.Sprintf(" [binds %s for the step, then back to %s]", s.Driver, prof.Pipeline.HomeDriver)
		}
		p.Steps = append(p.Steps, ps)
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
		fmt.Fprintf(w, "category purge: the record is returned only if a verifying step passes in the run\n")
	case "":
		fmt.Fprintf(w, "category: none claimed (set clear or purge; purge needs a verifying step)\n")
	default:
		fmt.Fprintf(w, "category %s\n", p.Category)
	}
	for i, s := range p.Steps {
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
		fmt.Fprintf(w, "  %d. %-4s %s (%s): %s", i+1, strings.ToUpper(s.Action), s.Name, s.Type, s.Why)
		if len(flags) > 0 {
			fmt.Fprintf(w, " [%s]", strings.Join(flags, "; "))
		}
		fmt.Fprintf(w, "\n       %s\n", s.Does)
		if s.Action == "fail" {
			fmt.Fprintf(w, "  the run would stop here and the device would be quarantined\n")
			return
		}
	}
}
