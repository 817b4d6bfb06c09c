package claims

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRecordNamesExternalToolVersions: a built-in step's external tools
// (the engine's "external_tools" detail) appear in the record's tools with
// their versions, beside the built-in itself; one the backend could not
// version is named without one.
func TestRecordNamesExternalToolVersions(t *testing.T) {
	var z RecordSanitization
	z.add(Step{Name: "erase", Details: map[string]any{
		"tool":           map[string]any{"name": "scour built-in nvme-erase", "version": "v1"},
		"external_tools": map[string]any{"nvme-cli": "nvme version 2.4 (git 2.4+debian)", "devlink": ""},
	}}, "succeeded")
	want := []RecordTool{
		{Step: "erase", Name: "scour built-in nvme-erase", Version: "v1"},
		{Step: "erase", Name: "devlink"},
		{Step: "erase", Name: "nvme-cli", Version: "nvme version 2.4 (git 2.4+debian)"},
	}
	if diff := cmp.Diff(want, z.Tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}
