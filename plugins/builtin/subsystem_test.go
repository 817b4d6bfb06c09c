package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// A sanitize acts on the whole NVM subsystem: on one shared by two
// controllers (a PF and its VF, a dual-port drive's ports: two devices
// here, two tenants' data) cleaning one must never erase the other's.

const nvmePeer = hardware.Address("0000:81:00.1")

func sharedSim(t *testing.T, allow ...string) *sim.Simulator {
	t.Helper()
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, AllowSubsystemSanitize: allow,
		Simulator: hardware.SimConfig{StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{
			{Address: string(nvmeA), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, FNA: 4, Subsystem: "dual"},
			{Address: string(nvmePeer), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, FNA: 4, Subsystem: "dual"},
			{Address: string(nvmeB), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111},
		}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSharedSubsystemDiscovered(t *testing.T) {
	s := sharedSim(t)
	dev, err := s.Discover(context.Background(), nvmeA)
	if err != nil {
		t.Fatal(err)
	}
	n := dev.NVMe
	if n.CMIC&2 == 0 || n.Subsystem == "" || fmt.Sprint(n.OtherControllers) != "[nvme1]" || n.SubsystemSanitizeAllowed {
		t.Fatalf("shared subsystem not discovered: %+v", n)
	}
	alone, err := s.Discover(context.Background(), nvmeB)
	if err != nil {
		t.Fatal(err)
	}
	if alone.NVMe.CMIC != 0 || len(alone.NVMe.OtherControllers) != 0 || hardware.SubsystemSanitizeRefusal(nvmeB, alone.NVMe) != nil {
		t.Fatalf("single-controller subsystem seen as shared: %+v", alone.NVMe)
	}
}

func TestEraseOnSharedSubsystemFormatsOwnNamespacesOnly(t *testing.T) {
	s := sharedSim(t)
	res, err := simRun(t, s, nvmeA, "nvme-erase", map[string]any{"poll": "1ms"})
	if err != nil {
		t.Fatalf("nvme-erase on a shared subsystem: %v", err)
	}
	if res.Details[plugins.EraseKey] != "format-ses2" {
		t.Fatalf("erase %v, want format-ses2 (sanitize refused on a shared subsystem): %v", res.Details[plugins.EraseKey], res.Details)
	}
	if nu := fmt.Sprint(res.Details["not_used"]); !strings.Contains(nu, "allow_subsystem_sanitize") || !strings.Contains(nu, "nvme1") {
		t.Fatalf("not_used does not say why sanitize was refused: %s", nu)
	}
	if tenant(media(t, s, nvmeA)) {
		t.Fatal("the device's own namespace still holds tenant data")
	}
	if !tenant(media(t, s, nvmePeer)) {
		t.Fatal("erasing one controller erased its neighbour's namespace")
	}
	// Dry runs predict the same.
	dev, _ := s.Discover(context.Background(), nvmeA)
	if e, ok := PredictErasure("nvme-erase", nil, dev); !ok || e.ID != "format-ses2" {
		t.Fatalf("prediction %+v %v, want format-ses2", e, ok)
	}
}

func TestSanitizeStepRefusedOnSharedSubsystem(t *testing.T) {
	s := sharedSim(t)
	_, err := simRun(t, s, nvmeA, "nvme-sanitize", map[string]any{"poll": "1ms"})
	if plugins.CodeOf(err) != plugins.CodeUnsupported || !strings.Contains(err.Error(), "allow_subsystem_sanitize") {
		t.Fatalf("nvme-sanitize on a shared subsystem: %v, want unsupported naming allow_subsystem_sanitize", err)
	}
	if !tenant(media(t, s, nvmeA)) || !tenant(media(t, s, nvmePeer)) {
		t.Fatal("a refused sanitize touched the media")
	}
	// The backend refuses on its own too, whatever a caller decided.
	err = s.Sanitize(context.Background(), nvmeA, hardware.SanitizeBlock, time.Millisecond, nil)
	if !errors.Is(err, hardware.ErrSharedSubsystem) || !errors.Is(err, hardware.ErrUnsupported) {
		t.Fatalf("backend sanitize on a shared subsystem: %v", err)
	}
	if !tenant(media(t, s, nvmePeer)) {
		t.Fatal("the backend's refused sanitize touched the neighbour")
	}
}

func TestEraseOnSharedSubsystemWithoutSafeTechniqueFailsPermanently(t *testing.T) {
	dir := t.TempDir()
	noFormat := 0
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated,
		Simulator: hardware.SimConfig{StateDir: dir, Step: time.Millisecond, Devices: []hardware.SimDevice{
			{Address: string(nvmeA), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, OACS: &noFormat, Subsystem: "dual"},
			{Address: string(nvmePeer), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, Subsystem: "dual"},
		}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = simRun(t, s, nvmeA, "nvme-erase", map[string]any{"allow_overwrite": false})
	if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), "no safe erase") {
		t.Fatalf("nvme-erase with no safe technique: %v, want a permanent failure saying so", err)
	}
	if !tenant(media(t, s, nvmePeer)) || !tenant(media(t, s, nvmeA)) {
		t.Fatal("media touched")
	}
}

func TestSubsystemSanitizeAllowedByOperator(t *testing.T) {
	s := sharedSim(t, string(nvmeA))
	res, err := simRun(t, s, nvmeA, "nvme-erase", map[string]any{"poll": "1ms"})
	if err != nil || res.Details[plugins.EraseKey] != "sanitize-crypto" {
		t.Fatalf("allowed subsystem sanitize: %v %v", res, err)
	}
	// As on a real drive, the sanitize reached the whole subsystem: that
	// is what the operator allowed.
	if tenant(media(t, s, nvmePeer)) {
		t.Fatal("the simulated sanitize did not reach the other controller's namespace")
	}
}

// uncheckingBackend is a real-like backend on a shared subsystem whose
// hidden-namespace check cannot be made (list-ctrl fails), while the
// subsystem holds a tenant's detached namespace nobody can see.
type uncheckingBackend struct {
	*fakehw.Backend
	check     bool // answers CheckHiddenNamespaces
	formatted int
}

var unchecked = map[string]any{hardware.HiddenNamespacesCheckedKey: false, hardware.HiddenNamespacesNoteKey: "not checked: nvme list-ctrl: exit status 1"}

func (b *uncheckingBackend) FormatDetails(context.Context, hardware.Address, string, int) (map[string]any, error) {
	b.formatted++
	return unchecked, nil
}

type uncheckingChecker struct{ *uncheckingBackend }

func (uncheckingChecker) CheckHiddenNamespaces(context.Context, hardware.Address, string) (map[string]any, error) {
	return unchecked, nil
}

// TestEraseOnSharedSubsystemFailsClosedWhenUnchecked: with the sanitize
// refused for sharing, a format (or overwrite) whose hidden-namespace
// check could not be made must never report clean: a tenant's detached
// namespace would go back to the pool. With the check available up front
// nothing is formatted at all; with only the format's own report the
// verdict is still try-again-later.
func TestEraseOnSharedSubsystemFailsClosedWhenUnchecked(t *testing.T) {
	dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme",
		NVMe: &hardware.NVMeInfo{Controller: "nvme0", CMIC: 2, OACS: 0xa, SANICAP: 0b10, Namespaces: []string{"/dev/nvme0n1"}}}
	for _, withCheck := range []bool{true, false} {
		b := &uncheckingBackend{Backend: &fakehw.Backend{}}
		var be hardware.Backend = b
		if withCheck {
			be = uncheckingChecker{b}
		}
		res, err := run(t, "nvme-erase", be, dev, map[string]any{"poll": "1ms"})
		if plugins.CodeOf(err) != plugins.CodeTryAgainLater || res != nil || !strings.Contains(err.Error(), "could not be checked") {
			t.Fatalf("check up front %v: nvme-erase with an unchecked hidden-namespace check on a shared subsystem: %v, %v; want try-again-later, not clean", withCheck, res, err)
		}
		if withCheck && b.formatted != 0 {
			t.Fatalf("formatted %d namespaces although the check could not be made", b.formatted)
		}
	}
}

// The overwrite fallback (no Format NVM) fails closed as well, before a
// byte is written.
func TestEraseOnSharedSubsystemOverwriteFailsClosedWhenUnchecked(t *testing.T) {
	m := mediaFile(t, 1<<20)
	before, _ := os.ReadFile(m.Path)
	dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme",
		NVMe: &hardware.NVMeInfo{Controller: "nvme0", CMIC: 2, OACS: 0x8, SANICAP: 0b10, Namespaces: []string{m.Path}}}
	b := &uncheckingBackend{Backend: &fakehw.Backend{MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil }}}
	res, err := run(t, "nvme-erase", uncheckingChecker{b}, dev, map[string]any{"poll": "1ms"})
	if plugins.CodeOf(err) != plugins.CodeTryAgainLater || res != nil {
		t.Fatalf("nvme-erase overwrite fallback, unchecked on a shared subsystem: %v, %v; want try-again-later", res, err)
	}
	if after, _ := os.ReadFile(m.Path); !bytes.Equal(after, before) {
		t.Fatal("overwrote although the hidden-namespace check could not be made")
	}
}

// TestFormatRefusedWhereFNAReachesSharedSubsystem: with id-ctrl fna bit 0
// a format of any namespace formats every namespace of the subsystem,
// with bit 1 a secure erase does: on a shared subsystem that is the
// neighbour's data, exactly what the sanitize refusal protects. nvme-erase
// falls to the overwrite of its own namespaces, nvme-format is refused,
// the backend refuses on its own too, and the operator's allowance lifts
// it as for a sanitize.
func TestFormatRefusedWhereFNAReachesSharedSubsystem(t *testing.T) {
	for _, fna := range []int{1, 2, 4 | 2} {
		t.Run(fmt.Sprintf("fna%#x", fna), func(t *testing.T) {
			newSim := func(allow ...string) *sim.Simulator {
				s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, AllowSubsystemSanitize: allow,
					Simulator: hardware.SimConfig{StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{
						{Address: string(nvmeA), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, FNA: fna, Subsystem: "dual"},
						{Address: string(nvmePeer), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b111, FNA: fna, Subsystem: "dual"},
					}}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := newSim()
			res, err := simRun(t, s, nvmeA, "nvme-erase", map[string]any{"poll": "1ms"})
			if err != nil {
				t.Fatalf("nvme-erase: %v", err)
			}
			if res.Details[plugins.EraseKey] != "overwrite" || !strings.Contains(fmt.Sprint(res.Details["not_used"]), "format refused") {
				t.Fatalf("erase %v, want overwrite with the format refused in not_used: %v", res.Details[plugins.EraseKey], res.Details)
			}
			if tenant(media(t, s, nvmeA)) {
				t.Fatal("the device's own namespace still holds tenant data")
			}
			if !tenant(media(t, s, nvmePeer)) {
				t.Fatal("erasing one controller formatted its neighbour's namespace")
			}
			dev, _ := s.Discover(context.Background(), nvmeA)
			if e, ok := PredictErasure("nvme-erase", nil, dev); !ok || e.ID != "overwrite" {
				t.Fatalf("prediction %+v %v, want overwrite", e, ok)
			}

			s = newSim()
			_, err = simRun(t, s, nvmeA, "nvme-format", nil)
			if !errors.Is(err, hardware.ErrSharedSubsystem) || !strings.Contains(err.Error(), "allow_subsystem_sanitize") || !strings.Contains(err.Error(), "fna") {
				t.Fatalf("nvme-format: %v, want a refusal naming fna and allow_subsystem_sanitize", err)
			}
			dev, _ = s.Discover(context.Background(), nvmeA)
			ns := dev.NVMe.Namespaces[0]
			if err := s.Format(context.Background(), nvmeA, ns, 1); !errors.Is(err, hardware.ErrSharedSubsystem) {
				t.Fatalf("backend format: %v, want ErrSharedSubsystem", err)
			}
			if !tenant(media(t, s, nvmeA)) || !tenant(media(t, s, nvmePeer)) {
				t.Fatal("a refused format touched the media")
			}

			// Allowed by the operator: the format runs, and reaches the
			// whole subsystem as the drive says it does.
			s = newSim(string(nvmeA))
			if _, err := simRun(t, s, nvmeA, "nvme-format", map[string]any{"crypto": false}); err != nil {
				t.Fatalf("allowed format: %v", err)
			}
			if tenant(media(t, s, nvmePeer)) {
				t.Fatal("the simulated fna format did not reach the other controller's namespace")
			}
		})
	}
}
