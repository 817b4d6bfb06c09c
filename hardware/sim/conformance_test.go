package sim

import (
	"testing"

	"github.com/scour-project/scour/hardware/hardwaretest"
)

func TestSimulatorConformance(t *testing.T) {
	hardwaretest.Run(t, newSim(t, t.TempDir()), hardwaretest.Layout{
		NVMe: "0000:81:00.0", VFIO: "0000:82:00.0", GPU: "0000:41:00.0", NIC: "0000:3b:00.0", Missing: "0000:99:00.0", Rebind: true,
	})
}
