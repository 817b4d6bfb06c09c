package placement

import (
	"testing"

	"github.com/scour-project/scour/e2e/harness"
)

// The harness owns the shared Placement container of this package's tests
// (started on first use, removed at the end).
func TestMain(m *testing.M) { harness.Main(m) }
