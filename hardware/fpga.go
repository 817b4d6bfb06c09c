package hardware

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// FPGAInfo is what the kernel's FPGA classes say about a PCI function:
// the fpga_region and fpga_manager class devices found under it and, on
// a DFL card (Intel PAC, N3000, N6000: drivers/fpga/dfl-*), the FPGA
// Management Engine's ids. Every field comes from sysfs; a card whose
// kernel driver registers none of these (Xilinx Alveo under XRT's own
// xclmgmt driver) has an FPGAInfo with no regions: its tool knows more.
type FPGAInfo struct {
	Regions  []FPGARegion
	Managers []FPGAManager
	// BitstreamID and BitstreamMetadata are the DFL FME's bitstream_id
	// and bitstream_metadata (hex numbers: the static region's loaded
	// bitstream and its version); "" without an FME.
	BitstreamID       string
	BitstreamMetadata string
}

// FPGARegion is one fpga_region class device ("region0").
type FPGARegion struct {
	Name string
	// CompatID is compat_id: the interface id a (partial) bitstream for
	// this region must be built against; "" when the driver has none.
	CompatID string
	// LoadedID is the id sysfs gives for what is loaded in this region:
	// the DFL FME's bitstream_id for the region holding the FME; ""
	// when sysfs does not say (then only the vendor tool can).
	LoadedID string
}

// FPGAManager is one fpga_manager class device ("fpga0"): name, state
// and status as the kernel's fpga-mgr core shows them.
type FPGAManager struct {
	Device string
	Name   string
	State  string
	Status string
}

// maxFPGADepth bounds the walk below a PCI function: the DFL layout puts
// a PR region's compat_id at fpga_region/region0/dfl-fme.0/
// dfl-fme-region.1/fpga_region/region1, six levels down.
const maxFPGADepth = 8

// FPGA walks addr's sysfs directory (symlinks not followed, so driver,
// subsystem and iommu_group lead nowhere) for fpga_region and
// fpga_manager class devices and a DFL FME. A device with none of them
// returns an empty FPGAInfo.
func (f FS) FPGA(addr Address) (*FPGAInfo, error) {
	root, err := filepath.EvalSymlinks(f.devPath(addr))
	if err != nil {
		return nil, fmt.Errorf("FPGA %s: %w", addr, err)
	}
	info := &FPGAInfo{}
	read := func(elems ...string) string {
		b, _ := os.ReadFile(filepath.Join(elems...))
		return strings.TrimSpace(string(b))
	}
	regionOf := map[string]int{} // region directory -> index in info.Regions
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == root {
			return nil // unreadable entries are skipped: sysfs has many
		}
		rel, _ := filepath.Rel(root, p)
		if strings.Count(rel, string(filepath.Separator)) >= maxFPGADepth {
			return fs.SkipDir
		}
		switch parent := filepath.Base(filepath.Dir(p)); {
		case parent == "fpga_region":
			regionOf[p] = len(info.Regions)
			info.Regions = append(info.Regions, FPGARegion{Name: d.Name(), CompatID: read(p, "compat_id")})
		case parent == "fpga_manager":
			info.Managers = append(info.Managers, FPGAManager{Device: d.Name(), Name: read(p, "name"), State: read(p, "state"), Status: read(p, "status")})
		case strings.HasPrefix(d.Name(), "dfl-fme.") && info.BitstreamID == "":
			id := read(p, "bitstream_id")
			if id == "" {
				return nil
			}
			info.BitstreamID, info.BitstreamMetadata = id, read(p, "bitstream_metadata")
			// The FME sits in the region the DFL core registered for the
			// whole card: its bitstream_id is what that region holds.
			if i, ok := regionOf[filepath.Dir(p)]; ok {
				info.Regions[i].LoadedID = id
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("FPGA %s: %w", addr, err)
	}
	sort.Slice(info.Regions, func(i, j int) bool { return info.Regions[i].Name < info.Regions[j].Name })
	sort.Slice(info.Managers, func(i, j int) bool { return info.Managers[i].Device < info.Managers[j].Device })
	return info, nil
}

// Region returns the region called name.
func (i *FPGAInfo) Region(name string) (FPGARegion, bool) {
	for _, r := range i.Regions {
		if r.Name == name {
			return r, true
		}
	}
	return FPGARegion{}, false
}

func deriveFPGA(c Capabilities, f *FPGAInfo) {
	c["fpga.regions"] = Ordered(strconv.Itoa(len(f.Regions)))
	c["fpga.manager"] = Bool(len(f.Managers) > 0)
	c["fpga.dfl"] = Bool(f.BitstreamID != "")
	setIf(c, "fpga.bitstream_id", f.BitstreamID)
	var compat []string
	for _, r := range f.Regions {
		if r.CompatID != "" {
			compat = append(compat, r.CompatID)
		}
	}
	if len(compat) > 0 {
		c["fpga.compat_id"] = Set(compat...)
	}
}

// FPGAImage is a golden bitstream, already fetched and verified, that a
// step puts into an FPGA region.
type FPGAImage struct {
	// Path is the local file holding the verified bytes.
	Path string
	// ID is the id the image declares (the Glance property naming it):
	// after programming, the device must report it.
	ID string
}

// FPGAProgrammer is a backend that can program an FPGA region and say
// what the region holds. Found by type assertion: the real backend reads
// the ids sysfs gives and leaves programming to the operator's vendor
// tool (a plugin); the simulator does both.
type FPGAProgrammer interface {
	// ProgramFPGA loads img into region ("" for the whole device).
	ProgramFPGA(ctx context.Context, addr Address, region string, img FPGAImage, p Progress) error
	// FPGALoadedID is the id the device reports for region; ErrUnsupported
	// when it reports none this backend can read.
	FPGALoadedID(ctx context.Context, addr Address, region string) (string, error)
	// ClearFPGAMemory zeroes the card's memory and reads it back;
	// ErrUnsupported where the backend cannot.
	ClearFPGAMemory(ctx context.Context, addr Address, p Progress) (map[string]any, error)
}

var _ FPGAProgrammer = (*Real)(nil)

var fpgaCaps = []string{"fpga.regions", "fpga.manager", "fpga.dfl", "fpga.bitstream_id", "fpga.compat_id"}

func (r *Real) discoverFPGA(dev *Device) {
	info, err := r.fs.FPGA(dev.Address)
	if err != nil {
		markAbsent(dev, err.Error(), fpgaCaps...)
		return
	}
	dev.FPGA = info
}

// ProgramFPGA is unsupported on real hardware: mainline Linux gives user
// space no generic way to load a bitstream (fpga_manager has no write
// attribute; DFL partial reconfiguration is an ioctl that OPAE's
// fpgaconf drives; Alveo cards load through XRT's xbmgmt). The
// fpga-program step runs the operator's vendor tool as a plugin instead
// (args.programmer).
func (r *Real) ProgramFPGA(ctx context.Context, addr Address, region string, img FPGAImage, p Progress) error {
	return fmt.Errorf("program FPGA %s region %q: the kernel offers no generic programming interface; give the fpga-program step a programmer plugin (OPAE fpgaconf, XRT xbmgmt): %w", addr, region, ErrUnsupported)
}

// FPGALoadedID reads the id sysfs gives for what region holds (the DFL
// FME's bitstream_id for the card's own region); ErrUnsupported when
// sysfs says nothing about the region.
func (r *Real) FPGALoadedID(ctx context.Context, addr Address, region string) (string, error) {
	info, err := r.fs.FPGA(addr)
	if err != nil {
		return "", err
	}
	if reg, ok := info.Region(region); ok && reg.LoadedID != "" {
		return reg.LoadedID, nil
	}
	return "", fmt.Errorf("FPGA %s region %q: sysfs reports no loaded bitstream id for it: %w", addr, region, ErrUnsupported)
}

// ClearFPGAMemory is unsupported on real hardware: only a vendor tool
// can reach the card's memory (the fpga-clear-memory step's programmer).
func (r *Real) ClearFPGAMemory(ctx context.Context, addr Address, p Progress) (map[string]any, error) {
	return nil, fmt.Errorf("clear FPGA %s memory: no kernel interface; give the step a vendor tool plugin: %w", addr, ErrUnsupported)
}
