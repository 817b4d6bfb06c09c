package claims

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/scour-project/scour/plugins"
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

// What a resumed run's later steps read from an earlier step's stored
// record survives the size limit, however large the rest: the erase, its
// expected read-back and how many blocks it sampled (verify: a count with
// the samples gone fails it, where nothing at all would read as "not
// applicable"), fpga-program's readback (fpga-readback), and the
// retirement marks (the record's retirement). Found in review (rev1
// High 1): only the samples' count tells their loss from their absence.
func TestBoundDetailsKeepsWhatLaterStepsRead(t *testing.T) {
	later := map[string]any{
		plugins.EraseKey: "sanitize-crypto", plugins.ExpectKey: plugins.ExpectNone, plugins.SampledKey: 32,
		"readback":    map[string]any{"expected": "0xabc", "regions": []any{map[string]any{"region": "region1"}}},
		retireWipeKey: true, retireReadBackKey: true,
	}
	d := map[string]any{
		// A kept key this large leaves room for nothing that is not kept.
		plugins.VerificationKey: map[string]any{"result": "passed", "reason": strings.Repeat("r", 3500)},
		"pre_erase_samples":     strings.Repeat("x", 3700),
		"not_used":              []string{"a", "b"},
	}
	for i := range 40 { // smaller than any of them: dropped last, were they not kept
		d[fmt.Sprintf("k%02d", i)] = 1
	}
	for k, v := range later {
		d[k] = v
	}
	got := boundDetails(d)
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	if len(got) > MaxOutputBytes {
		t.Fatalf("stored %d bytes, limit %d", len(got), MaxOutputBytes)
	}
	for k := range later {
		if _, ok := m[k]; !ok {
			t.Errorf("key %s dropped (truncated_keys %v)", k, m["truncated_keys"])
		}
	}
	if _, ok := m["pre_erase_samples"]; ok {
		t.Errorf("pre_erase_samples kept: the test no longer forces a drop")
	}
}
