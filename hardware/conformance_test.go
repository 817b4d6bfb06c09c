package hardware_test

import (
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/hardwaretest"
)

func TestRealConformance(t *testing.T) {
	hardwaretest.Run(t, hardware.NewFixtureBackend(t), hardwaretest.Layout{
		NVMe: "0000:01:00.0", VFIO: "0000:02:00.0", GPU: "0000:41:00.0", NIC: "0000:3b:00.0", Missing: "0000:99:00.0",
	})
}
