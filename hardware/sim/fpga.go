package sim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/scour-project/scour/hardware"
)

var _ hardware.FPGAProgrammer = (*Simulator)(nil)

// BitstreamHeader starts the first line of a simulated bitstream: the
// simulated card reports the id after it once programmed ("SCOUR-SIM-
// BITSTREAM id=0x23000410010310"), as a real card reports the id built
// into the bitstream, whatever the image's metadata declares. A file
// without it loads as UnknownBitstream.
const BitstreamHeader = "SCOUR-SIM-BITSTREAM id="

// UnknownBitstream is the id a simulated card reports after loading a
// file that has no BitstreamHeader.
const UnknownBitstream = "sim-unknown-bitstream"

// fpgaRegions names the simulated card's regions: region0 (the card's
// own region holding the FME) and one per partial-reconfiguration region.
func (d *simDev) fpgaRegions() []string {
	out := make([]string, d.cfg.FPGARegions)
	for i := range out {
		out[i] = fmt.Sprintf("region%d", i)
	}
	return out
}

// writeFPGASysfs lays out the DFL sysfs of the card (drivers/fpga/dfl.c,
// dfl-fme-main.c, dfl-fme-region.c, fpga-mgr.c): region0 for the card
// holds dfl-fme.0 with bitstream_id (what region0 holds) and the FME's
// fpga_manager; each further region hangs off a dfl-fme-region.N.
func (s *Simulator) writeFPGASysfs(d *simDev, st *state) error {
	dev := filepath.Join(string(s.fs), "devices", "pci0000:00", string(d.addr))
	fme := filepath.Join(dev, "fpga_region", "region0", "dfl-fme.0")
	files := map[string]string{
		filepath.Join(fme, "bitstream_id"):                                     st.FPGA["region0"],
		filepath.Join(fme, "bitstream_metadata"):                               "0x0",
		filepath.Join(fme, "dfl-fme-mgr.0", "fpga_manager", "fpga0", "name"):   "DFL FME FPGA Manager",
		filepath.Join(fme, "dfl-fme-mgr.0", "fpga_manager", "fpga0", "state"):  "operating",
		filepath.Join(fme, "dfl-fme-mgr.0", "fpga_manager", "fpga0", "status"): "",
	}
	for i, r := range d.fpgaRegions()[1:] {
		files[filepath.Join(fme, fmt.Sprintf("dfl-fme-region.%d", i+1), "fpga_region", r, "compat_id")] = fmt.Sprintf("sim-pr-interface-%d", i+1)
	}
	for p, v := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (s *Simulator) fpga(addr hardware.Address) (*simDev, error) {
	d, err := s.dev(addr)
	if err != nil {
		return nil, err
	}
	if d.cfg.Kind != hardware.KindFPGA {
		return nil, fmt.Errorf("%s is a %s device, not an FPGA: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
	}
	return d, nil
}

// bitstreamID reads the id a simulated bitstream carries.
func bitstreamID(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	line, _ := bufio.NewReader(fh).ReadString('\n')
	if id, ok := strings.CutPrefix(strings.TrimSpace(line), BitstreamHeader); ok && id != "" {
		return id, nil
	}
	return UnknownBitstream, nil
}

// ProgramFPGA loads img into region ("" loads every region, as a
// whole-device tool does): the region then reports the id in the file.
func (s *Simulator) ProgramFPGA(ctx context.Context, addr hardware.Address, region string, img hardware.FPGAImage, p hardware.Progress) error {
	d, err := s.fpga(addr)
	if err != nil {
		return err
	}
	regions := d.fpgaRegions()
	if region != "" {
		if !slices.Contains(regions, region) {
			return fmt.Errorf("program FPGA %s: no region %q (it has %v): %w", addr, region, regions, hardware.ErrUnsupported)
		}
		regions = []string{region}
	}
	slow, err := s.enter(ctx, d, "program-fpga")
	if err != nil {
		return err
	}
	id, err := bitstreamID(img.Path)
	if err != nil {
		return fmt.Errorf("program FPGA %s: %w", addr, err)
	}
	for i := range steps {
		if err := s.pause(ctx, slow); err != nil {
			return fmt.Errorf("program FPGA %s: %w", addr, err)
		}
		if p != nil {
			p(float64(i+1) / steps)
		}
	}
	st, err := s.update(d, func(st *state) {
		if st.FPGA == nil {
			st.FPGA = map[string]string{}
		}
		for _, r := range regions {
			st.FPGA[r] = id
		}
	})
	if err != nil {
		return err
	}
	return s.writeFPGASysfs(d, st)
}

// FPGALoadedID is the id region holds ("": region0).
func (s *Simulator) FPGALoadedID(ctx context.Context, addr hardware.Address, region string) (string, error) {
	d, err := s.fpga(addr)
	if err != nil {
		return "", err
	}
	if _, err := s.enter(ctx, d, "fpga-readback"); err != nil {
		return "", err
	}
	if region == "" {
		region = "region0"
	}
	st, err := s.load(d)
	if err != nil {
		return "", err
	}
	id, ok := st.FPGA[region]
	if !ok {
		return "", fmt.Errorf("FPGA %s: no region %q: %w", addr, region, hardware.ErrUnsupported)
	}
	return id, nil
}

// ClearFPGAMemory zeroes the card's memory file and reads it back.
func (s *Simulator) ClearFPGAMemory(ctx context.Context, addr hardware.Address, p hardware.Progress) (map[string]any, error) {
	d, err := s.fpga(addr)
	if err != nil {
		return nil, err
	}
	slow, err := s.enter(ctx, d, "clear-fpga-memory")
	if err != nil {
		return nil, err
	}
	mem := d.mediaFiles()
	if err := s.rewrite(ctx, mem, false, slow, p); err != nil {
		return nil, fmt.Errorf("clear FPGA %s memory: %w", addr, err)
	}
	if err := verifyZero(mem[0].Path); err != nil {
		return nil, fmt.Errorf("clear FPGA %s memory: verify: %w", addr, err)
	}
	return map[string]any{"method": "simulated: zero the card's memory, read it back", "bytes": mem[0].Size}, nil
}
