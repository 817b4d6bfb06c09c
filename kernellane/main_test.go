package kernellane

import (
	"testing"

	"github.com/scour-project/scour/e2e/harness"
)

// TestMain removes the e2e containers TestScourdEndToEnd shared.
func TestMain(m *testing.M) { harness.Main(m) }
