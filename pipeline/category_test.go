package pipeline

import (
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// A pipeline claiming purge must have a required verifying step, or it
// could never produce a returned record; --check-config says so.
func TestPurgeCategoryNeedsAVerifyingStep(t *testing.T) {
	no := false
	cases := []struct {
		name     string
		category string
		steps    []Step
		wantErr  string
	}{
		{"purge with verify", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}, {Name: "check", Type: "verify"}}, ""},
		{"purge with verifying plugin", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}, {Name: "check", Type: TypePlugin, Path: "/p/check", Verifies: true}}, ""},
		{"purge without", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}}, "category purge needs a required step that verifies"},
		{"purge with optional verify", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}, {Name: "check", Type: "verify", Required: &no}}, "category purge needs"},
		{"clear without", CategoryClear, []Step{{Name: "wipe", Type: "overwrite"}}, ""},
		{"unknown", "destroy", []Step{{Name: "wipe", Type: "overwrite"}}, `category "destroy" must be clear, purge or no-erase`},
	}
	for _, c := range cases {
		cfg := Config{PluginDirs: []string{"/p"}, Profiles: []Profile{{Name: "nvme", Match: Match{ResourceClasses: []string{"*"}},
			Pipeline: Pipeline{Name: "wipe", Category: c.category, Steps: c.steps}}}}
		cfg.setDefaults()
		err := cfg.Validate()
		if (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.wantErr)
		}
	}
}

// validateOne validates a config with one profile (named nvme) whose
// pipeline has category and steps.
func validateOne(category string, steps ...Step) error {
	cfg := Config{PluginDirs: []string{"/p"}, Profiles: []Profile{{Name: "nvme", Match: Match{ResourceClasses: []string{"*"}},
		Pipeline: Pipeline{Name: "wipe", Category: category, Steps: steps}}}}
	cfg.setDefaults()
	return cfg.Validate()
}

// Review finding (M2): a pipeline with no step that erases anything (a
// wear check, a reset) was accepted, whatever its category, and its runs
// returned devices with the last tenant's data, recorded "clear". Now it
// is refused unless it says category no-erase (a device that holds no
// tenant data), which its records carry; clear and purge need a step that
// reports its technique, as the claims store does; no-erase refuses a
// built-in that erases (its records would deny the erase). A verifying
// plugin, destructive by default, erases nothing either: it counted as
// the pipeline's erase, and a pipeline of only a read-back was accepted
// and its runs came out clean (second review, M2).
func TestPipelineWithoutAnEraseIsRefused(t *testing.T) {
	no := false
	wear := Step{Name: "wear", Type: "nvme-wear-check"}
	reset := Step{Name: "reset", Type: "pci-reset"}
	quietPlugin := Step{Name: "query", Type: TypePlugin, Path: "/p/query", Destructive: &no}
	erasingPlugin := Step{Name: "wipe", Type: TypePlugin, Path: "/p/wipe"}
	// Destructive by default, but it checks the result: it erases nothing.
	verifyingPlugin := Step{Name: "check", Type: TypePlugin, Path: "/p/check", Verifies: true}
	for _, c := range []struct {
		name     string
		category string
		steps    []Step
		wantErr  string
	}{
		{"no category, wear check only", "", []Step{wear}, "no step erases anything (steps: wear (nvme-wear-check))"},
		{"no category, reset only", "", []Step{reset}, "may the pipeline say category: no-erase instead"},
		{"no category, a non-destructive plugin only", "", []Step{quietPlugin}, "no step erases anything"},
		{"no category, verifying plugin only", "", []Step{verifyingPlugin}, "no step erases anything (steps: check (plugin))"},
		{"clear, verifying plugin only", CategoryClear, []Step{wear, verifyingPlugin}, "category clear needs a step that erases and reports the technique"},
		{"purge, verifying plugin only", CategoryPurge, []Step{verifyingPlugin}, "category purge needs a step that erases"},
		{"purge, an erasing and a verifying plugin", CategoryPurge, []Step{erasingPlugin, verifyingPlugin}, ""},
		{"clear, wear check only", CategoryClear, []Step{wear, reset}, "category clear needs a step that erases and reports the technique"},
		{"purge, verify only", CategoryPurge, []Step{{Name: "check", Type: "verify"}}, "category purge needs a step that erases"},
		{"clear, gpu-scrub reports no technique", CategoryClear, []Step{{Name: "scrub", Type: "gpu-scrub"}}, "leave category empty"},
		{"no category, gpu-scrub", "", []Step{{Name: "scrub", Type: "gpu-scrub"}, reset}, ""},
		{"no category, fpga-program", "", []Step{{Name: "program", Type: "fpga-program", Args: map[string]any{"image": map[string]any{"glance_id": "x"}}}}, ""},
		{"no category, an erasing plugin", "", []Step{erasingPlugin}, ""},
		{"clear, an erasing plugin", CategoryClear, []Step{wear, erasingPlugin}, ""},
		{"clear, overwrite", CategoryClear, []Step{wear, {Name: "wipe", Type: "overwrite"}, reset}, ""},
		{"no-erase, reset only", CategoryNoErase, []Step{reset}, ""},
		{"no-erase, a plugin", CategoryNoErase, []Step{erasingPlugin, reset}, ""},
		{"no-erase with an erasing built-in", CategoryNoErase, []Step{{Name: "wipe", Type: "nvme-erase"}, reset}, "steps[0] (wipe): type nvme-erase erases, but the pipeline says category no-erase"},
	} {
		err := validateOne(c.category, c.steps...)
		if (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "pipelines.profiles[0] (nvme).pipeline") {
			t.Errorf("%s: %v does not name the profile", c.name, err)
		}
	}
}

// Review finding (M2 b): verifies: true on a built-in other than verify
// was silently ignored (the reviewer's config: category clear, only
// nvme-wear-check with verifies: true, was accepted). It is refused,
// naming the step; on a plugin, and on verify (which always verifies),
// it stands.
func TestVerifiesOnlyOnPluginSteps(t *testing.T) {
	erase := Step{Name: "erase", Type: "nvme-erase"}
	err := validateOne(CategoryClear, erase, Step{Name: "wear", Type: "nvme-wear-check", Verifies: true})
	if err == nil || !strings.Contains(err.Error(), "steps[1] (wear): verifies: true is for a plugin step") || !strings.Contains(err.Error(), "built-in nvme-wear-check does not verify") {
		t.Fatalf("Validate = %v; want verifies refused on the wear check, naming it", err)
	}
	for _, s := range []Step{{Name: "check", Type: "verify", Verifies: true}, {Name: "check", Type: TypePlugin, Path: "/p/check", Verifies: true}} {
		if err := validateOne(CategoryPurge, erase, s); err != nil {
			t.Errorf("verifies on %s: %v", s.Type, err)
		}
	}
}

// Review finding (M3): destructive: false on a destructive built-in was
// accepted, and the step then ran with no Placement check (an overwrite
// on an allocated device, Placement asked 0 times, verdict clean). It is
// refused, naming the step, for every destructive built-in; on a
// non-destructive built-in or a plugin it stands.
func TestDestructiveFalseRefusedOnDestructiveBuiltins(t *testing.T) {
	no := false
	erase := Step{Name: "erase", Type: "nvme-erase"}
	n := 0
	for _, name := range builtinNames() {
		spec, _ := lookupBuiltin(name)
		if !spec.Destructive {
			continue
		}
		n++
		s := Step{Name: "x", Type: name, Destructive: &no}
		err := validateOne("", erase, s)
		if err == nil || !strings.Contains(err.Error(), "steps[1] (x): destructive: false, but "+name+" is destructive") {
			t.Errorf("%s with destructive: false: Validate = %v; want it refused, naming the step", name, err)
		}
	}
	if n < 5 {
		t.Fatalf("only %d destructive built-ins", n)
	}
	for _, s := range []Step{{Name: "x", Type: "verify", Destructive: &no}, {Name: "x", Type: TypePlugin, Path: "/p/x", Destructive: &no}} {
		if err := validateOne("", erase, s); err != nil {
			t.Errorf("destructive: false on %s: %v", s.Type, err)
		}
	}
}

// Review finding (M4): kinds: [nmve] made a profile unmatchable, and a
// later catch-all with a weak pipeline cleaned the NVMe. A kind outside
// the ones discovery gives is refused, naming the profile and the known
// kinds.
func TestMatchKindsMustBeKnown(t *testing.T) {
	cfg := Config{Profiles: []Profile{
		{Name: "nvme", Match: Match{Kinds: []string{"nmve"}}, Pipeline: Pipeline{Name: "p", Steps: []Step{{Name: "erase", Type: "nvme-erase"}}}},
	}}
	cfg.setDefaults()
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `pipelines.profiles[0] (nvme).match.kinds: "nmve" is not a device kind`) || !strings.Contains(err.Error(), "(nvme, gpu, nic, fpga, generic)") {
		t.Fatalf("Validate = %v; want nmve refused, naming the profile and the known kinds", err)
	}
	// Every kind discovery gives is accepted.
	for _, class := range []string{"0x010802", "0x030000", "0x020000", "0x120000", "0x110000"} {
		cfg.Profiles[0].Match.Kinds = []string{string(hardware.KindFromClass(class))}
		if err := cfg.Validate(); err != nil {
			t.Errorf("kind %s (class %s): %v", cfg.Profiles[0].Match.Kinds[0], class, err)
		}
	}
}

// Every built-in says what it does to a tenant's data: a new one must be
// put in one list, or pipelines relying on it would be refused (or let
// through) by accident.
func TestEveryBuiltinIsClassified(t *testing.T) {
	for _, name := range builtinNames() {
		n := 0
		for _, l := range [][]string{techniqueBuiltins, otherErasingBuiltins, nonErasingBuiltins} {
			if slices.Contains(l, name) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("built-in %s is in %d of techniqueBuiltins, otherErasingBuiltins, nonErasingBuiltins; want exactly 1", name, n)
		}
		spec, _ := lookupBuiltin(name)
		if !spec.Destructive && !slices.Contains(nonErasingBuiltins, name) {
			t.Errorf("built-in %s erases but is not destructive: Placement would not be asked before it", name)
		}
	}
}

// Second review, M4: category no-erase was accepted on any profile, and
// the "no step erases" refusal offered it to every pipeline: an NVMe
// profile of only a wear check, saying no-erase, validated and returned
// drives unerased. no-erase is refused on a profile whose match.kinds
// names a kind that holds tenant data (nvme, gpu, fpga), naming the
// profile and the kind; it stands for a NIC. The refusal of a pipeline
// without an erase offers no-erase only for devices that hold no tenant
// data.
func TestNoEraseRefusedForMediaKinds(t *testing.T) {
	reset := Step{Name: "reset", Type: "pci-reset"}
	wear := Step{Name: "wear", Type: "nvme-wear-check"}
	validate := func(kinds []string, steps ...Step) error {
		cfg := Config{Profiles: []Profile{{Name: "dev", Match: Match{Kinds: kinds},
			Pipeline: Pipeline{Name: "p", Category: CategoryNoErase, Steps: steps}}}}
		cfg.setDefaults()
		return cfg.Validate()
	}
	for _, kinds := range [][]string{{"nvme"}, {"gpu"}, {"fpga"}, {"nic", "nvme"}} {
		k := kinds[len(kinds)-1]
		err := validate(kinds, wear, reset)
		if err == nil || !strings.Contains(err.Error(), "pipelines.profiles[0] (dev): the pipeline says category no-erase, but match.kinds includes "+k+", a kind of device that holds tenant data") ||
			!strings.Contains(err.Error(), "Give the pipeline an erasing step") {
			t.Errorf("no-erase on kinds %v: Validate = %v; want it refused, naming the profile and %s", kinds, err, k)
		}
	}
	if err := validate([]string{"nic"}, reset); err != nil {
		t.Errorf("no-erase on kinds [nic]: %v", err)
	}
	// Without an erase and a category, the refusal offers no-erase only
	// for devices that hold no tenant data.
	err := validateOne("", wear)
	if err == nil || !strings.Contains(err.Error(), "Only if the devices of this profile hold no tenant data") || !strings.Contains(err.Error(), "never an NVMe, a GPU or an FPGA") {
		t.Errorf("Validate = %v; want no-erase offered only for devices that hold no tenant data", err)
	}
}
