package pipeline

import (
	"strings"
	"testing"
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
