package backend

import (
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	b, err := Open(hardware.Config{SysfsRoot: "../testdata/sys"}, nil)
	if _, ok := b.(*hardware.Real); !ok || err != nil {
		t.Errorf("default backend = %T, %v; want *hardware.Real", b, err)
	}
	b, err = Open(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{StateDir: t.TempDir()}}, nil)
	if _, ok := b.(*sim.Simulator); !ok || err != nil {
		t.Errorf("simulated backend = %T, %v; want *sim.Simulator", b, err)
	}
	if _, err := Open(hardware.Config{Backend: "fake"}, nil); err == nil {
		t.Error("unknown backend accepted")
	}
}
