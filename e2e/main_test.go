// Package e2e holds scour's end-to-end scenarios: real scourd processes
// (built from this tree) against a real RabbitMQ and a real OpenStack
// Placement in containers (e2e/harness), on simulated hardware whose media
// files really get wiped. Nova's side is played through the harness: the
// allocations and burns nova-compute makes in Placement, and the
// notifications it publishes, byte-exact, in both formats.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/e2e/harness"
)

// bins holds scourd and scourctl built once for the whole package.
var bins string

func TestMain(m *testing.M) {
	// Built into the repository's cache folder (git-ignored), so nothing
	// is left behind in /tmp and reruns reuse Go's build cache.
	dir, err := filepath.Abs("../.cache/e2e-bin")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bins = dir
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/scourd", "../cmd/scourctl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building scourd and scourctl:", err)
		os.Exit(1)
	}
	harness.Main(m, harness.RabbitMQService, harness.PlacementService)
}
