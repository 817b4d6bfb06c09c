package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
)

func fpgaSim(t *testing.T) (*Simulator, hardware.Address) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{StateDir: dir,
		Devices: []hardware.SimDevice{{Address: "0000:5e:00.0", Kind: hardware.KindFPGA, FPGARegions: 2, BitstreamID: "0xtenant"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, "0000:5e:00.0"
}

func TestSimulatorFPGAProgramAndReadBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, addr := fpgaSim(t)
	dev, err := s.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Kind != hardware.KindFPGA || !dev.Capabilities["fpga.regions"].Equal(hardware.Ordered("2")) ||
		!dev.Capabilities["fpga.bitstream_id"].Equal(hardware.Set("0xtenant")) || !dev.Capabilities["fpga.dfl"].Bool {
		t.Fatalf("discovered %s with %v", dev.Kind, dev.Capabilities)
	}
	img := filepath.Join(t.TempDir(), "golden.gbs")
	if err := os.WriteFile(img, []byte(BitstreamHeader+"0xgolden\nbits"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ProgramFPGA(ctx, addr, "region1", hardware.FPGAImage{Path: img, ID: "0xgolden"}, nil); err != nil {
		t.Fatal(err)
	}
	for region, want := range map[string]string{"region0": "0xtenant", "region1": "0xgolden"} {
		if id, err := s.FPGALoadedID(ctx, addr, region); err != nil || id != want {
			t.Errorf("%s holds %q (%v), want %q", region, id, err, want)
		}
	}
	if err := s.ProgramFPGA(ctx, addr, "", hardware.FPGAImage{Path: img}, nil); err != nil {
		t.Fatal(err)
	}
	// Discovery reads the new id from the simulated sysfs, after a restart too.
	s2, err := New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: s.cfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dev, err = s2.Discover(ctx, addr); err != nil || !dev.Capabilities["fpga.bitstream_id"].Equal(hardware.Set("0xgolden")) {
		t.Errorf("after programming every region and a restart: %v, %v", dev.Capabilities["fpga.bitstream_id"], err)
	}
	// A file without the header loads as an unknown bitstream.
	plain := filepath.Join(t.TempDir(), "plain.bin")
	if err := os.WriteFile(plain, []byte("no header"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ProgramFPGA(ctx, addr, "region0", hardware.FPGAImage{Path: plain, ID: "0xgolden"}, nil); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.FPGALoadedID(ctx, addr, "region0"); id != UnknownBitstream {
		t.Errorf("region0 holds %q after loading a file without header, want %q", id, UnknownBitstream)
	}
	if err := s.ProgramFPGA(ctx, addr, "region7", hardware.FPGAImage{Path: img}, nil); !errors.Is(err, hardware.ErrUnsupported) {
		t.Errorf("programming a region the card lacks: %v, want ErrUnsupported", err)
	}
}

func TestSimulatorFPGAFaultsAndMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, addr := fpgaSim(t)
	mem := s.devs[addr].mediaFiles()[0].Path
	if allZero(read(t, mem)) {
		t.Fatal("fresh FPGA memory holds no tenant data")
	}
	if _, err := s.ClearFPGAMemory(ctx, addr, nil); err != nil {
		t.Fatal(err)
	}
	if !allZero(read(t, mem)) {
		t.Error("FPGA memory not zero after ClearFPGAMemory")
	}
	s.SetFault(addr, "program-fpga", FaultHang)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond) // a hang blocks until this deadline
	defer cancel()
	if err := s.ProgramFPGA(hctx, addr, "", hardware.FPGAImage{Path: mem}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung program: %v, want the deadline", err)
	}
	s.SetFault(addr, "program-fpga", "")
	s.SetFault(addr, "fpga-readback", FaultFail)
	if _, err := s.FPGALoadedID(ctx, addr, "region0"); err == nil {
		t.Error("read-back with a fail fault succeeded")
	}
}
