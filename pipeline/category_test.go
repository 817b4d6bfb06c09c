package pipeline

import (
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
		{"purge with verifying plugin", CategoryPurge, []Step{{Name: "check", Type: TypePlugin, Path: "/p/check", Verifies: true}}, ""},
		{"purge without", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}}, "category purge needs a required step that verifies"},
		{"purge with optional verify", CategoryPurge, []Step{{Name: "wipe", Type: "overwrite"}, {Name: "check", Type: "verify", Required: &no}}, "category purge needs"},
		{"clear without", CategoryClear, []Step{{Name: "wipe", Type: "overwrite"}}, ""},
		{"unknown", "destroy", []Step{{Name: "wipe", Type: "overwrite"}}, `category "destroy" must be clear or purge`},
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
