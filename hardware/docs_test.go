package hardware

import (
	"os"
	"strings"
	"testing"
)

// docs/hardware.md must list every capability name scour knows.
func TestDocsListEveryCapability(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/hardware.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, s := range KnownCapabilities() {
		name := s.Name
		if s.Prefix {
			name += "<"
		}
		if !strings.Contains(doc, "| `"+name) {
			t.Errorf("docs/hardware.md has no table row for %s", s.Name)
		}
	}
	for _, op := range FaultOps {
		if !strings.Contains(doc, "`"+op+"`") {
			t.Errorf("docs/hardware.md does not name simulator operation %s", op)
		}
	}
}
