package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// Config is the `pipelines:` section of scour's config: which devices get
// which cleaning pipeline.
type Config struct {
	// PluginDirs are the only directories executable plugins run from.
	PluginDirs []string `yaml:"plugin_dirs"`
	// MaxConcurrent bounds cleaning runs on this host (default 32). A
	// run spends most of its time in steps that work inside the device
	// (sanitize, format, reset, firmware) while scourd waits, so only the
	// host-bound steps have a small limit (MaxHostBoundSteps).
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxHostBoundSteps bounds the steps running at once that make the
	// host do the work (overwrite, verify, gpu-scrub, plugins unless their
	// step says in_device: true): they share its CPU, memory bandwidth and
	// PCIe links, so more at once finish no sooner (default 4).
	MaxHostBoundSteps int `yaml:"max_host_bound_steps"`
	// Profiles are tried in order; the first that matches a device wins.
	Profiles []Profile `yaml:"profiles"`
}

// Profile selects devices and names their pipeline.
type Profile struct {
	Name  string `yaml:"name"`
	Match Match  `yaml:"match"`
	// MaxConcurrent bounds runs of this profile at once (0 = host limit
	// only), e.g. two NVMe sanitizes at a time.
	MaxConcurrent int      `yaml:"max_concurrent"`
	Pipeline      Pipeline `yaml:"pipeline"`
}

// Match holds a profile's criteria. Every criterion given must hold; a list
// holds when any element matches. A profile with no criteria matches
// nothing (a catch-all must say so: resource_classes: ["*"]).
type Match struct {
	ResourceClasses []string `yaml:"resource_classes"`
	// VendorProduct entries are "vvvv:pppp" hex ids ("144d:a80a"); the
	// product may be "*".
	VendorProduct []string `yaml:"vendor_product"`
	// PCIClass entries are class-code prefixes ("0108" = NVMe/mass
	// storage, "0x030200"); "0x" is optional.
	PCIClass []string `yaml:"pci_class"`
	Kinds    []string `yaml:"kinds"`
	Requires Requires `yaml:"requires"`
}

// Pipeline is a named, versioned, ordered list of steps. Change Version
// whenever the steps change: an interrupted run resumes only under the
// same name and version.
type Pipeline struct {
	Name    string `yaml:"name"`
	Version int    `yaml:"version"`
	// MaxRuns is how many runs a device gets before a recoverable
	// failure becomes quarantine (default 3).
	MaxRuns int `yaml:"max_runs"`
	// HomeDriver is the driver the device goes back to after a step that
	// needed another one (default vfio-pci).
	HomeDriver string `yaml:"home_driver"`
	// Category is the sanitization category the pipeline claims, in NIST
	// SP 800-88 / IEEE 2883 terms: "clear" or "purge" ("" claims none), or
	// "no-erase": the pipeline erases nothing (a device that holds no
	// tenant data, e.g. a NIC cleaned by a reset), the only way to
	// configure a pipeline without an erasing step. A clear or purge run is
	// refused a clean record unless an erasing step (one reporting its
	// technique) succeeded in it; a purge pipeline also needs a required
	// verifying step, and a verification that passed after that erase
	// (docs/pipelines.md, Category).
	Category string `yaml:"category"`
	Steps    []Step `yaml:"steps"`
	// RetireWipe is the step that erases a device a step (required or
	// optional) said to retire (code 13: a worn drive) before the run's quarantine
	// verdict, so that it never leaves for an RMA or disposal with the
	// last tenant's data. Unset: an NVMe gets nvme-erase (the strongest
	// technique its controller offers, bound to nvme when it lives on
	// another driver); a device of another kind is retired unwiped,
	// which its record and the metric say (docs/pipelines.md, Retirement).
	RetireWipe *Step `yaml:"retire_wipe"`
}

// RetireWipeName names the default retirement wipe step (and one
// configured without a name).
const RetireWipeName = "retire-wipe"

// RetireReadBackName names the read-back after a retirement wipe.
const RetireReadBackName = "retire-readback"

// Sanitization categories a pipeline may claim.
const (
	CategoryClear = "clear"
	CategoryPurge = "purge"
	// CategoryNoErase says the pipeline erases nothing: for a device
	// class that holds no tenant data (a NIC whose cleaning is a reset or
	// a firmware flash). Its records say so instead of claiming an erase.
	// Never for tenantDataKinds.
	CategoryNoErase = "no-erase"
)

// tenantDataKinds are the device kinds that hold a tenant's data (an
// NVMe's media, a GPU's memory, an FPGA's memory and bitstream): a
// pipeline for them must erase. Validate refuses category no-erase on a
// profile whose match.kinds names one, and the engine refuses a no-erase
// run a clean verdict on a device discovered as one (unerased), whatever
// the profile matched it by (a resource class, a PCI class).
var tenantDataKinds = []hardware.DeviceKind{hardware.KindNVMe, hardware.KindGPU, hardware.KindFPGA}

// aKind names a device kind with its article, in messages ("an NVMe").
func aKind(k hardware.DeviceKind) string {
	switch k {
	case hardware.KindNVMe:
		return "an NVMe"
	case hardware.KindGPU:
		return "a GPU"
	case hardware.KindFPGA:
		return "an FPGA"
	case hardware.KindNIC:
		return "a NIC"
	}
	return "a " + string(k)
}

// noEraseFor says which devices category no-erase is for, in messages.
const noEraseFor = "category no-erase is only for a device that holds no tenant data, such as a NIC cleaned by a reset or a firmware flash, never an NVMe, a GPU or an FPGA"

// Built-in step types by what they do to the data a tenant left on the
// device. Every built-in is in exactly one list
// (TestEveryBuiltinIsClassified): a pipeline must contain an erasing
// step unless it says category no-erase, and a clear or purge pipeline
// one that reports the technique it applied.
var (
	// techniqueBuiltins erase and report the technique they applied
	// (details.technique), which the claims store needs to see succeed in
	// a clear or purge run.
	techniqueBuiltins = []string{"nvme-erase", "nvme-format", "nvme-sanitize", "overwrite"}
	// otherErasingBuiltins erase what a tenant left (memory, a bitstream)
	// but report no technique: enough for a pipeline that claims no
	// category, not for clear or purge.
	otherErasingBuiltins = []string{"fpga-clear-memory", "fpga-program", "gpu-scrub"}
	// nonErasingBuiltins erase nothing: a reset, a firmware flash, checks.
	nonErasingBuiltins = []string{"firmware-flash", "fpga-readback", "nvme-wear-check", "pci-reset", "verify"}
)

// erases reports whether the step may erase a tenant's data: an erasing
// built-in, or a plugin that is destructive (one that is not must not
// erase: Placement is not asked before it) and does not verify (a
// verifying step checks the cleaning's result, it erases nothing, as
// retire_wipe already says; plugins are destructive by default, so a
// verifying plugin counted as the pipeline's erase and a run of only a
// read-back came out clean).
func (s *Step) erases() bool {
	if s.Type == TypePlugin {
		return (s.Destructive == nil || *s.Destructive) && !s.Verifies
	}
	return slices.Contains(techniqueBuiltins, s.Type) || slices.Contains(otherErasingBuiltins, s.Type)
}

// reportsTechnique reports whether the step may erase and report the
// technique it applied, as a clear or purge run needs: an erasing
// built-in that does, or an erasing plugin (which must, docs/plugins.md).
func (s *Step) reportsTechnique() bool {
	if s.Type == TypePlugin {
		return s.erases()
	}
	return slices.Contains(techniqueBuiltins, s.Type)
}

// stepList names steps as "name (type)" for messages.
func stepList(steps []Step) string {
	var out []string
	for _, s := range steps {
		out = append(out, fmt.Sprintf("%s (%s)", s.Name, s.Type))
	}
	return strings.Join(out, ", ")
}

// OnUnsupported values.
const (
	OnUnsupportedFail = "fail"
	OnUnsupportedSkip = "skip"
)

// Step is one pipeline step.
type Step struct {
	Name string `yaml:"name"`
	// Type is a built-in step name or "plugin".
	Type string `yaml:"type"`
	// Path is the plugin executable (type: plugin).
	Path     string         `yaml:"path"`
	Args     map[string]any `yaml:"args"`
	Requires Requires       `yaml:"requires"`
	// OnUnsupported decides what unmet requirements (or a plugin's CHECK
	// answering "unsupported") do: fail the run (default) or skip the step.
	OnUnsupported string        `yaml:"on_unsupported"`
	Timeout       time.Duration `yaml:"timeout"`
	Retry         Retry         `yaml:"retry"`
	// Destructive steps run only after Placement shows no allocation on the
	// device. Default: the built-in's own nature; plugins: true.
	Destructive *bool `yaml:"destructive"`
	// Required steps must succeed for the device to be clean (default
	// true); a failed optional step is recorded and the run goes on,
	// unless its verification did not pass or it is a verifying step
	// (verificationRefused).
	Required *bool `yaml:"required"`
	// Driver, when set, binds the device to this driver for the step and
	// back to the pipeline's home driver afterwards, even on failure.
	Driver string `yaml:"driver"`
	// InDevice marks a step whose work runs inside the device while the
	// host waits: it takes no host-bound slot. Default: the built-in's own
	// nature (sanitize, format, erase, reset, firmware, wear check);
	// plugins: false (assume the host does the work).
	InDevice *bool `yaml:"in_device"`
	// Verifies marks a plugin step that checks the cleaning's result
	// (reporting details.verification); the built-in verify always does.
	// Such a step that answers ok without a passed verification fails
	// (run.judge).
	Verifies bool `yaml:"verifies"`

	// retireWipe marks the run's retirement wipe (Pipeline.RetireWipe):
	// its record carries RetireWipeKey.
	retireWipe bool
	// retireReadBack marks the read-back after the retirement wipe
	// (RetireReadBackKey on its record).
	retireReadBack bool
}

// pluginPaths are the executables the step runs: a plugin step's path,
// or the plugins a built-in names in its PluginArgs (a vendor tool).
func (s *Step) pluginPaths() []string {
	if s.Type == TypePlugin {
		return []string{s.Path}
	}
	spec, _ := lookupBuiltin(s.Type)
	var out []string
	for _, a := range spec.PluginArgs {
		if p, ok := s.Args[a].(string); ok && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// verifies reports whether the step checks the cleaning's result.
func (s *Step) verifies() bool { return s.Type == "verify" || (s.Type == TypePlugin && s.Verifies) }

// Retry is a step's retry policy within one run.
type Retry struct {
	Attempts int           `yaml:"attempts"` // total tries (default 1)
	Backoff  time.Duration `yaml:"backoff"`  // wait between tries (default 10s), doubled each time
	// MaxBackoff caps the wait between tries (default 5m, or Backoff
	// when that is longer). Each wait is jittered by ±20 % under it.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// RetryableCodes are the protocol codes worth another try (default
	// 11 try-again-later and 15 timeout).
	RetryableCodes []int `yaml:"retryable_codes"`
}

// TypePlugin is the step type of executable plugins.
const TypePlugin = "plugin"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

func (c *Config) setDefaults() {
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 32
	}
	if c.MaxHostBoundSteps == 0 {
		c.MaxHostBoundSteps = 4
	}
	for i := range c.Profiles {
		p := &c.Profiles[i].Pipeline
		if p.MaxRuns == 0 {
			p.MaxRuns = 3
		}
		if p.HomeDriver == "" {
			p.HomeDriver = "vfio-pci"
		}
		if p.Version == 0 {
			p.Version = 1
		}
		for j := range p.Steps {
			p.Steps[j].setDefaults()
		}
		if p.RetireWipe != nil {
			if p.RetireWipe.Name == "" {
				p.RetireWipe.Name = RetireWipeName
			}
			p.RetireWipe.setDefaults()
		}
	}
}

// defaultMaxStepBackoff caps the doubling wait between a step's tries
// when retry.max_backoff is not set: a step with many attempts does not
// wait hours between its last ones.
const defaultMaxStepBackoff = 5 * time.Minute

func (s *Step) setDefaults() {
	if s.OnUnsupported == "" {
		s.OnUnsupported = OnUnsupportedFail
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Hour
	}
	if s.Retry.Attempts == 0 {
		s.Retry.Attempts = 1
	}
	if s.Retry.Backoff == 0 {
		s.Retry.Backoff = 10 * time.Second
	}
	if s.Retry.MaxBackoff == 0 {
		s.Retry.MaxBackoff = max(defaultMaxStepBackoff, s.Retry.Backoff)
	}
	if s.Retry.RetryableCodes == nil {
		s.Retry.RetryableCodes = []int{plugins.CodeTryAgainLater, plugins.CodeTimeout}
	}
	if s.Required == nil {
		t := true
		s.Required = &t
	}
	if s.Destructive == nil {
		d := true // plugins and unknown types: assume the worst
		if spec, ok := lookupBuiltin(s.Type); ok {
			d = spec.Destructive
		}
		s.Destructive = &d
	}
	if s.InDevice == nil {
		in := false
		if spec, ok := lookupBuiltin(s.Type); ok {
			in = spec.InDevice
		}
		s.InDevice = &in
	}
}

// Validate reports every problem in c.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MaxConcurrent < 1 {
		add("pipelines.max_concurrent must be at least 1")
	}
	if c.MaxHostBoundSteps < 1 {
		add("pipelines.max_host_bound_steps must be at least 1")
	}
	if len(c.Profiles) == 0 {
		add("pipelines.profiles: no profile configured, so no device can ever be cleaned")
	}
	seen := map[string]bool{}
	for i, p := range c.Profiles {
		where := fmt.Sprintf("pipelines.profiles[%d] (%s)", i, p.Name)
		if !nameRE.MatchString(p.Name) {
			add("%s: name %q must be lower-case letters, digits, '.', '_' or '-'", where, p.Name)
		}
		if seen[p.Name] {
			add("%s: duplicate profile name", where)
		}
		seen[p.Name] = true
		if p.MaxConcurrent < 0 {
			add("%s: max_concurrent must not be negative", where)
		}
		errs = append(errs, p.Match.validate(where)...)
		if p.Pipeline.Category == CategoryNoErase {
			for _, k := range p.Match.Kinds {
				if slices.Contains(tenantDataKinds, hardware.DeviceKind(k)) {
					add("%s: the pipeline says category %s, but match.kinds includes %s, a kind of device that holds tenant data: a run that erases nothing would return it with the last tenant's data on it. Give the pipeline an erasing step and claim clear, purge or no category; %s",
						where, CategoryNoErase, k, noEraseFor)
				}
			}
		}
		errs = append(errs, p.Pipeline.validate(where, c.PluginDirs)...)
	}
	return errors.Join(errs...)
}

func (m *Match) validate(where string) []error {
	var errs []error
	if len(m.ResourceClasses)+len(m.VendorProduct)+len(m.PCIClass)+len(m.Kinds)+len(m.Requires) == 0 {
		errs = append(errs, fmt.Errorf("%s.match: no criteria (use resource_classes: [\"*\"] for a catch-all)", where))
	}
	for _, vp := range m.VendorProduct {
		if _, _, ok := splitVendorProduct(vp); !ok {
			errs = append(errs, fmt.Errorf("%s.match.vendor_product: %q is not vvvv:pppp (hex, product may be *)", where, vp))
		}
	}
	for _, pc := range m.PCIClass {
		if normClass(pc) == "" {
			errs = append(errs, fmt.Errorf("%s.match.pci_class: %q is not a hex class prefix", where, pc))
		}
	}
	for _, k := range m.Kinds {
		if !slices.Contains(knownKinds, hardware.DeviceKind(k)) {
			errs = append(errs, fmt.Errorf("%s.match.kinds: %q is not a device kind scour discovers (%s): this profile would never match such a device, and a later profile, perhaps a weaker pipeline, would clean it instead; write one of those kinds", where, k, kindList()))
		}
	}
	if _, err := ParseRequirements(m.Requires); err != nil {
		errs = append(errs, fmt.Errorf("%s.match.requires: %w", where, err))
	}
	return errs
}

// knownKinds are the device kinds discovery gives (hardware.KindFromClass):
// a match.kinds entry outside them matches nothing.
var knownKinds = []hardware.DeviceKind{hardware.KindNVMe, hardware.KindGPU, hardware.KindNIC, hardware.KindFPGA, hardware.KindGeneric}

func kindList() string {
	var out []string
	for _, k := range knownKinds {
		out = append(out, string(k))
	}
	return strings.Join(out, ", ")
}

func (p *Pipeline) validate(where string, pluginDirs []string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	where += ".pipeline"
	if !nameRE.MatchString(p.Name) {
		add("%s: name %q must be lower-case letters, digits, '.', '_' or '-'", where, p.Name)
	}
	if p.Version < 1 || p.MaxRuns < 1 {
		add("%s: version and max_runs must be at least 1", where)
	}
	if len(p.Steps) == 0 {
		add("%s: no steps: a pipeline that does nothing cannot make a device clean", where)
	}
	erasing := slices.ContainsFunc(p.Steps, func(s Step) bool { return s.erases() })
	switch p.Category {
	case "":
		if !erasing && len(p.Steps) > 0 {
			add("%s: no step erases anything (steps: %s), so a run would return the device with the last tenant's data on it: add an erasing step (%s, %s, or a plugin that is neither destructive: false nor verifies: true). Only if the devices of this profile hold no tenant data (a NIC cleaned by a reset or a firmware flash; never an NVMe, a GPU or an FPGA) may the pipeline say category: %s instead, which its records then carry",
				where, stepList(p.Steps), strings.Join(techniqueBuiltins, ", "), strings.Join(otherErasingBuiltins, ", "), CategoryNoErase)
		}
	case CategoryClear, CategoryPurge:
		if len(p.Steps) > 0 && !slices.ContainsFunc(p.Steps, func(s Step) bool { return s.reportsTechnique() }) {
			add("%s: category %s needs a step that erases and reports the technique it applied (%s, or an erasing plugin reporting details.technique), and none does (steps: %s): the claims store would refuse every run a clean record. %s report no technique: leave category empty for a pipeline that relies on them (a GPU or an FPGA); only a device that holds no tenant data (a NIC) says category: %s",
				where, p.Category, strings.Join(techniqueBuiltins, ", "), stepList(p.Steps), strings.Join(otherErasingBuiltins, ", "), CategoryNoErase)
		}
		if p.Category == CategoryPurge && !slices.ContainsFunc(p.Steps, func(s Step) bool { return s.verifies() && (s.Required == nil || *s.Required) }) {
			add("%s: category purge needs a required step that verifies the result (type verify, or a plugin with verifies: true): without one no run can produce a returned record", where)
		}
	case CategoryNoErase:
		for i, s := range p.Steps {
			if s.Type != TypePlugin && s.erases() {
				add("%s.steps[%d] (%s): type %s erases, but the pipeline says category %s (it erases nothing), and its records would deny the erase: claim clear or purge, leave category empty, or remove the step", where, i, s.Name, s.Type, CategoryNoErase)
			}
		}
	default:
		add("%s: category %q must be clear, purge or %s (or empty)", where, p.Category, CategoryNoErase)
	}
	names := map[string]bool{}
	for i, s := range p.Steps {
		sw := fmt.Sprintf("%s.steps[%d] (%s)", where, i, s.Name)
		if !nameRE.MatchString(s.Name) {
			add("%s: name %q must be lower-case letters, digits, '.', '_' or '-'", sw, s.Name)
		}
		if names[s.Name] {
			add("%s: duplicate step name", sw)
		}
		names[s.Name] = true
		errs = append(errs, s.validate(sw, pluginDirs)...)
	}
	if w := p.RetireWipe; w != nil {
		sw := fmt.Sprintf("%s.retire_wipe (%s)", where, w.Name)
		if !nameRE.MatchString(w.Name) {
			add("%s: name %q must be lower-case letters, digits, '.', '_' or '-'", sw, w.Name)
		}
		if names[w.Name] {
			add("%s: name is also a step's: the record could not tell the wipe from that step", sw)
		}
		if w.Destructive != nil && !*w.Destructive {
			add("%s: destructive: false: a wipe is destructive, and Placement must be asked before it", sw)
		}
		switch {
		case w.verifies():
			add("%s: a verifying step erases nothing: retire_wipe must erase (nvme-erase, nvme-sanitize, nvme-format, overwrite, or an erasing plugin)", sw)
		case slices.Contains(nonErasingBuiltins, w.Type):
			add("%s: type %s erases nothing: retire_wipe must erase (nvme-erase, nvme-sanitize, nvme-format, overwrite, or an erasing plugin)", sw, w.Type)
		}
		errs = append(errs, w.validate(sw, pluginDirs)...)
	}
	return errs
}

func (s *Step) validate(where string, pluginDirs []string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch spec, ok := lookupBuiltin(s.Type); {
	case s.Type == TypePlugin:
		if s.Path == "" {
			add("%s: type plugin needs a path", where)
		} else if !inDirs(s.Path, pluginDirs) {
			add("%s: plugin %q is not directly inside a plugin_dirs directory %v", where, s.Path, pluginDirs)
		}
	case !ok:
		add("%s: unknown step type %q (built-ins: %s; or \"plugin\" with a path)", where, s.Type, strings.Join(builtinNames(), ", "))
	default:
		if s.Path != "" {
			add("%s: path is only for type plugin", where)
		}
		if spec.Destructive && s.Destructive != nil && !*s.Destructive {
			add("%s: destructive: false, but %s is destructive: Placement must show no allocation before it runs, and a resumed run must see that the device was not used since; remove destructive: false", where, s.Type)
		}
		if s.Verifies && !s.verifies() {
			add("%s: verifies: true is for a plugin step that checks the cleaning's result; built-in %s does not verify, so the flag would be ignored: remove it, and add a step of type verify (or a verifying plugin) to check the erase", where, s.Type)
		}
		if spec.CheckArgs != nil {
			if err := spec.CheckArgs(s.Args); err != nil {
				add("%s: args: %v", where, err)
			}
		}
		for _, a := range spec.PluginArgs {
			if p, ok := s.Args[a].(string); ok && p != "" && !inDirs(p, pluginDirs) {
				add("%s: args.%s: plugin %q is not directly inside a plugin_dirs directory %v", where, a, p, pluginDirs)
			}
		}
	}
	if !slices.Contains([]string{OnUnsupportedFail, OnUnsupportedSkip}, s.OnUnsupported) {
		add("%s: on_unsupported %q must be skip or fail", where, s.OnUnsupported)
	}
	if s.Timeout < 0 || s.Retry.Attempts < 1 || s.Retry.Backoff < 0 {
		add("%s: timeout and backoff must not be negative and retry.attempts must be at least 1", where)
	}
	if s.Retry.MaxBackoff < s.Retry.Backoff {
		add("%s: retry.max_backoff %s is shorter than retry.backoff %s: raise it, or remove it for the default (5m, or the backoff when longer)", where, s.Retry.MaxBackoff, s.Retry.Backoff)
	}
	if _, err := ParseRequirements(s.Requires); err != nil {
		add("%s: requires: %w", where, err)
	}
	return errs
}

// StepOptional reports whether step index of the run's pipeline is
// optional (required: false), for stores that refuse a clean verdict after
// a failed required step. Unknown profiles, versions or indexes count as
// required.
func (c *Config) StepOptional(start RunStart, index int) bool {
	for _, p := range c.Profiles {
		if p.Name != start.Profile || p.Pipeline.Name != start.Pipeline || max(p.Pipeline.Version, 1) != start.PipelineVersion {
			continue
		}
		if index < 0 || index >= len(p.Pipeline.Steps) {
			return false
		}
		r := p.Pipeline.Steps[index].Required
		return r != nil && !*r
	}
	return false
}

// SetDefaults fills every unset field (config.Section).
func (c *Config) SetDefaults() { c.setDefaults() }
