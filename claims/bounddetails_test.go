package claims

import (
	"encoding/json"
	"strings"
	"testing"
)

// A step that failed twice with long messages, then succeeded, keeps the
// keys the purge check and resume read: earlier errors and other large
// values go first.
func TestBoundDetailsKeepsDecisionKeys(t *testing.T) {
	long := strings.Repeat("é plugin said something long ", 40)
	d := map[string]any{
		"technique":                 "sanitize-crypto",
		"verification":              map[string]any{"method": "readback", "passed": true},
		"scour_pipeline_definition": "sha256:" + strings.Repeat("a", 64),
		"tool":                      "scour-nvme",
		"scour_tries":               map[string]any{"count": 3, "earlier_errors": []string{long, long, long}},
		"pre_erase_samples":         strings.Repeat("x", 3000),
	}
	got := boundDetails(d)
	if len(got) > MaxOutputBytes {
		t.Fatalf("stored %d bytes, limit %d", len(got), MaxOutputBytes)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"technique", "verification", "scour_pipeline_definition", "tool"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("key %s lost: %s", k, got)
		}
	}
	if tries, _ := m["scour_tries"].(map[string]any); tries["count"] != float64(3) {
		t.Fatalf("scour_tries %v", m["scour_tries"])
	}
}
