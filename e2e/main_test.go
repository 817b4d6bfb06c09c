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
	warm := []harness.Service{harness.RabbitMQService, harness.PlacementService}
	// The Keystone tests share one Keystone, one Placement behind it and
	// one Glance behind it (docs/e2e.md): started in the background while
	// scourd is built and the serial tests run, they are ready when the
	// Keystone tests get their turn instead of each waiting for them in a
	// parallel slot.
	if harness.RunSelects(keystoneSharedTests...) {
		warm = append(warm, harness.KeystoneService, harness.KeystonePlacementService)
	}
	if harness.RunSelects(keystoneGlanceTests...) {
		warm = append(warm, harness.KeystoneGlanceService)
	}
	if harness.RunSelects(keystoneLegacyGlanceTests...) {
		warm = append(warm, harness.KeystoneLegacyGlanceService)
	}
	harness.MainAfter(m, buildBins, warm...)
}

// buildBins builds scourd and scourctl into the repository's cache folder
// (git-ignored), so nothing is left behind in /tmp and reruns reuse Go's
// build cache.
func buildBins() error {
	dir, err := filepath.Abs("../.cache/e2e-bin")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("e2e: %w", err)
	}
	bins = dir
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/scourd", "../cmd/scourctl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("e2e: building scourd and scourctl: %w", err)
	}
	return nil
}

// The tests on the shared Keystone and the Placement behind it, and of
// those the ones on the Glance behind it (secure RBAC) and on the one with
// secure RBAC off: what TestMain warms for them.
var (
	keystoneGlanceTests       = []string{"TestKeystoneFPGAGoldenImageFromGlance", "TestKeystoneGlanceReaderRefusedDownload"}
	keystoneLegacyGlanceTests = []string{"TestKeystoneLegacyGlanceGoldenImage"}
	keystoneSharedTests       = append(append([]string{"TestKeystoneCyborgAcceleratorLifecycle", "TestKeystoneLeastPrivilege",
		"TestKeystoneScourctl"}, keystoneGlanceTests...), keystoneLegacyGlanceTests...)
)
