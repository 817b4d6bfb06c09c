package pipeline

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
)

func planText(t *testing.T, e *Engine, addr string) (*Plan, string) {
	t.Helper()
	p, err := e.Plan(context.Background(), simTarget(addr))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	p.Write(&b)
	return p, b.String()
}

// TestDryRunWarnsAboutWhatCannotSucceed: the dry run of a vfio-bound
// drive warns about every step that cannot succeed as the device is bound
// now, does not call requirements unmet that are decided after a bind,
// and plans no pointless verify after a crypto erase it can predict.
func TestDryRunWarnsAboutWhatCannotSucceed(t *testing.T) {
	cfg := nvmeSteps(t, `
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-sanitize, driver: nvme, requires: {nvme.sanitize: ">=block"}, args: {poll: 10ms}}
        - {name: verify, type: verify, driver: nvme}
        - {name: fw, type: firmware-flash, required: false, args: {image: x.bin, sha256: "`+strings.Repeat("0", 64)+`", version: "1"}}
        - {name: reset, type: pci-reset}`)
	dev := qemuNVMe("0000:81:00.0", "S1", 1)
	dev.SANICAP, dev.NoReset = 0b111, true
	e, sm, _ := simEngine(t, cfg, dev)
	p, out := planText(t, e, "0000:81:00.0")
	want := map[string][]string{
		"wear":   {"cannot succeed", `bound to "vfio-pci"`, "driver: nvme"},
		"erase":  {"cannot tell before binding nvme"},
		"verify": {"crypto erase"},
		"fw":     {"fw_activate does not apply to NVMe"},
		"reset":  {"no sysfs reset file"},
	}
	for _, s := range p.Steps {
		w := strings.Join(s.Warnings, "\n")
		for _, frag := range want[s.Name] {
			if !strings.Contains(w, frag) {
				t.Errorf("step %s: warnings %q lack %q", s.Name, s.Warnings, frag)
			}
		}
		if s.Name == "erase" && (s.Action != "run" || !strings.Contains(s.Why, "decided once bound to nvme")) {
			t.Errorf("erase planned %s: %s", s.Action, s.Why)
		}
	}
	if !strings.Contains(out, "WARNING: cannot succeed") {
		t.Errorf("output shows no warnings:\n%s", out)
	}

	// Once seen on nvme (any driver step did that), the drive's facts are
	// remembered: the dry run predicts the crypto sanitize and plans
	// verify (of blocks sampled before it) without a warning.
	ctx := context.Background()
	sm.BindDriver(ctx, "0000:81:00.0", "nvme")
	if d, err := sm.Discover(ctx, "0000:81:00.0"); err != nil || d.Serial != "S1" {
		t.Fatalf("on nvme: %v, %v", d, err)
	}
	sm.BindDriver(ctx, "0000:81:00.0", "vfio-pci")
	p, _ = planText(t, e, "0000:81:00.0")
	for _, s := range p.Steps {
		switch s.Name {
		case "erase":
			if s.Action != "run" || s.Why != "requirements met" || len(s.Warnings) != 0 {
				t.Errorf("erase with remembered facts: %s %q %q", s.Action, s.Why, s.Warnings)
			}
		case "verify":
			// It will compare blocks sampled before the crypto erase.
			if s.Action != "run" || len(s.Warnings) != 0 {
				t.Errorf("verify after a predicted crypto erase: %s %q %q", s.Action, s.Why, s.Warnings)
			}
		}
	}
}

// TestDryRunOfShippedPipelineIsClean: the shipped NVMe pipeline raises no
// "cannot succeed" warning on a vfio-bound QEMU drive.
func TestDryRunOfShippedPipelineIsClean(t *testing.T) {
	e, _, _ := simEngine(t, shippedPipelines(t), qemuNVMe("0000:01:00.0", "A", 1))
	p, out := planText(t, e, "0000:01:00.0")
	if p.Profile != "nvme" || strings.Contains(out, "cannot succeed") || strings.Contains(out, "FAIL") {
		t.Fatalf("shipped pipeline dry run:\n%s", out)
	}
}

// TestDryRunShowsTheRetirementWipe: the dry run says, for every device,
// what a step saying retire (code 13) would lead to: the pipeline's
// retire_wipe with its type and args; else an NVMe's default nvme-erase,
// bound to nvme for the wipe; else plainly no wipe and a device retired
// unwiped.
func TestDryRunShowsTheRetirementWipe(t *testing.T) {
	ctx := context.Background()
	write := func(p *Plan) string {
		var b bytes.Buffer
		p.Write(&b)
		return b.String()
	}
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: shredded
    match: {resource_classes: [CUSTOM_SHRED]}
    pipeline:
      name: shredded
      retire_wipe: {name: shred, type: overwrite, args: {pattern: zero}}
      steps: [{name: wear, type: nvme-wear-check, driver: nvme}, {name: erase, type: nvme-erase, driver: nvme}]
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme
      steps: [{name: wear, type: nvme-wear-check, driver: nvme}, {name: erase, type: nvme-erase, driver: nvme}]
  - name: gpu
    match: {kinds: [gpu]}
    pipeline: {name: gpu, steps: [{name: scrub, type: gpu-scrub}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := simEngine(t, cfg, qemuNVMe("0000:81:00.0", "S1", 1),
		hardware.SimDevice{Address: "0000:41:00.0", Kind: hardware.KindGPU})

	// Default for an NVMe on vfio-pci: nvme-erase, every technique, bound to nvme.
	p, err := e.Plan(ctx, simTarget("0000:81:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	rw := p.RetireWipe
	if rw == nil || rw.Name != RetireWipeName || rw.Type != "nvme-erase" || rw.Configured || rw.Action != "run" ||
		rw.Args["crypto"] != true || rw.Args["allow_overwrite"] != true || !rw.Destructive {
		t.Fatalf("NVMe's retirement wipe %+v (none: %q); want the default nvme-erase, crypto and overwrite allowed, run, destructive", rw, p.NoRetireWipe)
	}
	out := write(p)
	for _, want := range []string{
		"if a step says retire (code 13), the run ends and this retirement wipe runs before the quarantine verdict (no retire_wipe configured: the default for a device of kind nvme)",
		"R. RUN  retire-wipe (nvme-erase)",
		"[binds nvme for the step, then back to vfio-pci]",
		"args: {allow_overwrite: true, crypto: true}",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("NVMe dry run lacks %q:\n%s", want, out)
		}
	}

	// The pipeline's retire_wipe, as configured.
	tg := simTarget("0000:81:00.0")
	tg.ResourceClass = "CUSTOM_SHRED"
	if p, err = e.Plan(ctx, tg); err != nil {
		t.Fatal(err)
	}
	if rw := p.RetireWipe; rw == nil || rw.Name != "shred" || rw.Type != "overwrite" || !rw.Configured || rw.Args["pattern"] != "zero" {
		t.Fatalf("configured retirement wipe %+v; want shred (overwrite, pattern zero) from retire_wipe", rw)
	}
	out = write(p)
	for _, want := range []string{"(the pipeline's retire_wipe)", "R. RUN  shred (overwrite)", "args: {pattern: zero}"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run with retire_wipe lacks %q:\n%s", want, out)
		}
	}

	// A GPU without retire_wipe: none, and retired unwiped, plainly.
	if p, err = e.Plan(ctx, simTarget("0000:41:00.0")); err != nil {
		t.Fatal(err)
	}
	if p.RetireWipe != nil || !strings.Contains(p.NoRetireWipe, `kind "gpu"`) {
		t.Fatalf("GPU's retirement wipe %+v, none %q; want none, saying why", p.RetireWipe, p.NoRetireWipe)
	}
	out = write(p)
	if !strings.Contains(out, "if a step says retire (code 13): no retirement wipe") || !strings.Contains(out, "RETIRED UNWIPED") {
		t.Errorf("GPU dry run does not say plainly that it would be retired unwiped:\n%s", out)
	}
}

// The dry run says what a run does with a requirement on a capability
// discovery could not read: the step fails (try again later, or the
// step's configuration when the NVMe is off nvme), whatever
// on_unsupported says; a step that binds another driver decides there.
func TestDryRunUnreadableRequirementFails(t *testing.T) {
	yes := true
	step := func(driver string) *Step {
		return &Step{Name: "erase", Type: "nvme-sanitize", Driver: driver, OnUnsupported: OnUnsupportedSkip,
			Requires: Requires{"nvme.sanitize": ">=block"}, Destructive: &yes, Required: &yes}
	}
	dev := func(driver, why string) *hardware.Device {
		d := nvmeDevice("0000:81:00.0")
		d.Driver = driver
		d.Absent = map[string]string{"nvme.format": why, "nvme.sanitize": why}
		return d
	}
	for _, tc := range []struct {
		name         string
		s            *Step
		d            *hardware.Device
		action, frag string
	}{
		{"on nvme, id-ctrl timed out", step(""), dev("nvme", "nvme id-ctrl timed out"), "fail", "nvme id-ctrl timed out"},
		{"on vfio-pci without driver: nvme", step(""), dev("vfio-pci", "bound to vfio-pci"), "fail", "give the step `driver: nvme`"},
		{"on vfio-pci, the step binds nvme", step("nvme"), dev("vfio-pci", "bound to vfio-pci"), "run", "decided once bound to nvme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := planStep(tc.s, tc.d, "vfio-pci", nil, true)
			if ps.Action != tc.action || !strings.Contains(ps.Why, tc.frag) {
				t.Fatalf("planned %s: %s; want %s saying %q", ps.Action, ps.Why, tc.action, tc.frag)
			}
		})
	}
}

// Second review, L1: the dry run did not predict the verdict of a run
// that would erase nothing (every erasing step planned SKIP: quarantine,
// run.unerased), nor of a no-erase pipeline on a device that holds tenant
// data; and its hint for a pipeline claiming no category, "set clear or
// purge", contradicted Validate for a GPU or FPGA pipeline, whose steps
// report no technique.
func TestDryRunPredictsARunThatErasesNothing(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: gpu
    match: {kinds: [gpu]}
    pipeline:
      name: gpu
      steps: [{name: scrub, type: gpu-scrub, requires: {pci.sriov: true}, on_unsupported: skip}]
  - name: by-class
    match: {resource_classes: [CUSTOM_NIC_OR_NOT]}
    pipeline: {name: by-class, category: no-erase, steps: [{name: reset, type: pci-reset}]}
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme
      steps: [{name: wear, type: nvme-wear-check, driver: nvme}, {name: erase, type: nvme-erase, driver: nvme}]
`))
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := simEngine(t, cfg, qemuNVMe("0000:81:00.0", "S1", 1), hardware.SimDevice{Address: "0000:41:00.0", Kind: hardware.KindGPU})

	_, out := planText(t, e, "0000:41:00.0")
	for _, want := range []string{
		"SKIP scrub (gpu-scrub)",
		"verdict would be quarantine: no erasing step would run (scrub (skip))",
		"category: none claimed (right for this pipeline: no step reports the technique it applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("GPU dry run lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "set clear or purge") {
		t.Errorf("GPU dry run advises a category Validate refuses for it:\n%s", out)
	}

	_, out = planText(t, e, "0000:81:00.0")
	if strings.Contains(out, "verdict would be") || !strings.Contains(out, "category: none claimed (clear or purge may be claimed") {
		t.Errorf("NVMe dry run (an erase runs) predicts a verdict or lacks the category hint:\n%s", out)
	}

	// A no-erase profile matched by resource class, on an NVMe.
	tg := simTarget("0000:81:00.0")
	tg.ResourceClass = "CUSTOM_NIC_OR_NOT"
	p, err := e.Plan(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	p.Write(&b)
	if !strings.Contains(b.String(), "verdict would be quarantine: the pipeline erases nothing (category no-erase), and an NVMe holds tenant data") {
		t.Errorf("no-erase dry run on an NVMe does not predict the quarantine:\n%s", b.String())
	}
}
