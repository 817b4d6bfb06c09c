//go:build kernelguest

package guest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/kernellane"
)

// TestBootedVFIOBound: every emulated controller starts bound to vfio-pci,
// as on a passthrough host.
func TestBootedVFIOBound(t *testing.T) {
	for _, d := range kernellane.Machine() {
		link, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", d.Addr, "driver"))
		if err != nil {
			t.Fatalf("%s (%s): no driver: %v", d.Addr, d.Serial, err)
		}
		if filepath.Base(link) != "vfio-pci" {
			t.Errorf("%s (%s) bound to %s, want vfio-pci", d.Addr, d.Serial, filepath.Base(link))
		}
	}
}
