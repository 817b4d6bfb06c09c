package builtin

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline/fakehw"
)

// heldImages is an ImageResolver handing out one Glance-like image whose
// Release it counts: a step must hold the image while it uses the file
// and release it once done, or the cache would never evict it.
type heldImages struct {
	path, id string
	released int
}

func (h *heldImages) Resolve(context.Context, map[string]any) (*GoldenImage, error) {
	b, err := os.ReadFile(h.path)
	if err != nil {
		return nil, err
	}
	sum := sha512.Sum512(b)
	return &GoldenImage{ID: "img-1", Name: "golden", HashAlgo: "sha512", HashValue: hex.EncodeToString(sum[:]), Size: int64(len(b)),
		Path: h.path, Source: "glance", Properties: map[string]string{"bitstream_id": h.id}, Release: func() { h.released++ }}, nil
}

// releaseWatcher programs through the simulator, noting whether the
// image was already released when it was programmed.
type releaseWatcher struct {
	*sim.Simulator
	h              *heldImages
	releasedBefore bool
}

func (w *releaseWatcher) ProgramFPGA(ctx context.Context, addr hardware.Address, region string, img hardware.FPGAImage, p hardware.Progress) error {
	if w.h.released > 0 {
		w.releasedBefore = true
	}
	return w.Simulator.ProgramFPGA(ctx, addr, region, img, p)
}

// fpga-program and firmware-flash hold a Glance image (its cache entry
// pinned) while they program or copy it, and release it when done, also
// when the step fails.
func TestGlanceImageHeldWhileUsedThenReleased(t *testing.T) {
	t.Run("fpga-program", func(t *testing.T) {
		s := fpgaSim(t)
		p := filepath.Join(t.TempDir(), "golden.gbs")
		if err := os.WriteFile(p, []byte(sim.BitstreamHeader+"0xgolden\nbits"), 0o444); err != nil {
			t.Fatal(err)
		}
		for _, declared := range []string{"0xgolden", "0xother"} { // passes, then fails its read-back
			h := &heldImages{path: p, id: declared}
			w := &releaseWatcher{Simulator: s, h: h}
			dev, err := s.Discover(context.Background(), fpgaAddr)
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := Lookup("fpga-program")
			_, err = spec.Run(context.Background(), w, &Target{Device: dev, Step: "program", Args: map[string]any{"image": map[string]any{"glance_id": "img-1"}}, Images: h})
			if (declared == "0xgolden") != (err == nil) {
				t.Fatalf("declared %s: %v", declared, err)
			}
			if w.releasedBefore || h.released != 1 {
				t.Errorf("declared %s: released before programming %v, released %d times after; want held while programmed, released once", declared, w.releasedBefore, h.released)
			}
		}
	})
	t.Run("firmware-flash", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(t.TempDir(), "fw.bin")
		if err := os.WriteFile(p, []byte("firmware"), 0o444); err != nil {
			t.Fatal(err)
		}
		h := &heldImages{path: p}
		running := "1"
		be := &fakehw.Backend{
			FirmwareDirF: func() string { return dir },
			FlashFirmwareF: func(context.Context, hardware.Address, hardware.FirmwareImage, hardware.Progress) error {
				running = "2"
				return nil
			},
			ActivateFirmwareF: func(context.Context, hardware.Address) error { return nil },
			FirmwareVersionsF: func(context.Context, hardware.Address) (map[string]string, error) {
				return map[string]string{"fw.mgmt": running}, nil
			},
		}
		spec, _ := Lookup("firmware-flash")
		args := map[string]any{"image": map[string]any{"glance_id": "img-1"}, "version": "2", "settle": "1ms"}
		if err := spec.CheckArgs(args); err != nil {
			t.Fatal(err)
		}
		_, err := spec.Run(context.Background(), be, &Target{Device: &hardware.Device{Address: addr, Kind: hardware.KindNIC}, Step: "flash", Args: args, Images: h})
		if err != nil {
			t.Fatal(err)
		}
		if h.released != 1 {
			t.Errorf("released %d times, want once", h.released)
		}
	})
}
