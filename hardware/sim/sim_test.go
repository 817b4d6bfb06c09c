package sim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
)

func testConfig(dir string) hardware.Config {
	return hardware.Config{
		Backend: hardware.BackendSimulated,
		Simulator: hardware.SimConfig{
			StateDir: dir,
			Step:     5 * time.Millisecond,
			Devices: []hardware.SimDevice{
				{Address: "0000:81:00.0", Kind: hardware.KindNVMe, Model: "SIM PM9A3", Serial: "SIM0001", Firmware: "GDC5602Q",
					Namespaces: 2, MediaBytes: 64 << 10, SANICAP: 3, FNA: 4, PercentUsed: 7, WearPerClean: 2},
				{Address: "0000:82:00.0", Kind: hardware.KindNVMe, Model: "SIM CM6", SANICAP: 6, Driver: "vfio-pci"},
				{Address: "0000:41:00.0", Kind: hardware.KindGPU, Model: "SIM A100", MemoryBytes: 128 << 10, ECC: true},
				{Address: "0000:3b:00.0", Kind: hardware.KindNIC, Model: "SIM CX6", NICFirmware: map[string]string{"fw.version": "22.31.1014", "fw": "22.31.1014"}},
			},
		},
		DeviceCapabilities: map[string]hardware.RawValues{"0000:81:00.0": {"custom.tier": "gold"}},
	}
}

func newSim(t *testing.T, dir string) *Simulator {
	t.Helper()
	s, err := New(testConfig(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

func TestSimulatorDiscover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSim(t, t.TempDir())
	addrs, _ := s.List(ctx)
	if diff := cmp.Diff([]hardware.Address{"0000:3b:00.0", "0000:41:00.0", "0000:81:00.0", "0000:82:00.0"}, addrs); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	d, err := s.Discover(ctx, "0000:81:00.0")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]hardware.Value{
		"kind": hardware.Set("nvme"), "pci.driver": hardware.Set("nvme"), "pci.reset": hardware.Bool(true), "pci.iommu": hardware.Bool(true),
		"nvme.sanitize": hardware.Ordered("block", "crypto"), "nvme.crypto_format": hardware.Bool(true), "nvme.percent_used": hardware.Ordered("7"),
		"nvme.firmware": hardware.Ordered("GDC5602Q"), "custom.tier": hardware.Ordered("gold"),
	} {
		if diff := cmp.Diff(want, d.Capabilities[name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if len(d.NVMe.Namespaces) != 2 || d.NVMe.Controller != "nvme0" || d.VendorID != "0x144d" {
		t.Errorf("device %+v nvme %+v", d, d.NVMe)
	}
	for _, ns := range d.NVMe.Namespaces {
		if b := read(t, ns); len(b) != 64<<10 || !bytes.HasPrefix(b, []byte(TenantPattern)) {
			t.Errorf("%s does not start with tenant data", ns)
		}
	}
	v, err := s.Discover(ctx, "0000:82:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if !v.NVMe.BoundToVFIO || v.Absent["nvme.sanitize"] == "" || v.Capabilities["nvme.block_device"].Bool {
		t.Errorf("vfio-bound: %+v absent %v", v.NVMe, v.Absent)
	}
	if _, err := s.Media(ctx, "0000:82:00.0"); !errors.Is(err, hardware.ErrWrongDriver) {
		t.Errorf("Media of vfio-bound: %v", err)
	}
	if _, err := s.Discover(ctx, "0000:99:00.0"); !errors.Is(err, hardware.ErrNoDevice) {
		t.Errorf("unknown device: %v", err)
	}
}

func TestSimulatorSanitizeWipesAndWearPersists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := newSim(t, dir)
	media, err := s.Media(ctx, "0000:81:00.0")
	if err != nil {
		t.Fatal(err)
	}
	var last float64
	if err := s.Sanitize(ctx, "0000:81:00.0", hardware.SanitizeBlock, 0, func(f float64) { last = f }); err != nil {
		t.Fatal(err)
	}
	for _, m := range media {
		if b := read(t, m.Path); int64(len(b)) != m.Size || !allZero(b) {
			t.Errorf("%s not zeroed by block sanitize", m.Path)
		}
	}
	if last != 1 {
		t.Errorf("final progress %v, want 1", last)
	}
	if err := s.WriteTenantData("0000:81:00.0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sanitize(ctx, "0000:81:00.0", hardware.SanitizeCrypto, 0, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range media {
		b := read(t, m.Path)
		if bytes.Contains(b, []byte(TenantPattern)) || allZero(b) {
			t.Errorf("%s after crypto erase: tenant data left or all zero (want noise)", m.Path)
		}
	}
	if err := s.Sanitize(ctx, "0000:81:00.0", hardware.SanitizeOverwrite, 0, nil); !errors.Is(err, hardware.ErrUnsupported) {
		t.Errorf("overwrite sanitize with sanicap 3: %v", err)
	}

	// Two cleanings at 2% each, and a new process sees the same wear.
	again := newSim(t, dir)
	sl, err := again.SmartLog(ctx, "0000:81:00.0")
	if err != nil || sl.PercentUsed != 11 {
		t.Errorf("wear after restart = %+v, %v; want percent_used 11", sl, err)
	}
	if b := read(t, media[0].Path); bytes.Contains(b, []byte(TenantPattern)) {
		t.Error("restart refilled cleaned media with tenant data")
	}
}

func TestSimulatorFormatScrubFlashBind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSim(t, t.TempDir())
	media, _ := s.Media(ctx, "0000:81:00.0")
	if err := s.Format(ctx, "0000:81:00.0", "nvme0n2", 0); err == nil {
		t.Error("format -s 0 accepted")
	}
	if err := s.Format(ctx, "0000:81:00.0", "/dev/nvme0n2", 1); err != nil {
		t.Fatal(err)
	}
	if !allZero(read(t, media[1].Path)) || allZero(read(t, media[0].Path)) {
		t.Error("format of nvme0n2 must zero exactly that namespace")
	}
	if err := s.Format(ctx, "0000:81:00.0", "nvme7n1", 1); err == nil {
		t.Error("format of a foreign namespace accepted")
	}

	var steps int
	if err := s.ScrubGPU(ctx, "0000:41:00.0", func(float64) { steps++ }); err != nil {
		t.Fatal(err)
	}
	if !allZero(read(t, s.StateDir("0000:41:00.0")+"/gpu-memory.img")) || steps != 10 {
		t.Errorf("GPU memory not zeroed or %d progress reports", steps)
	}
	if err := s.ScrubGPU(ctx, "0000:81:00.0", nil); !errors.Is(err, hardware.ErrUnsupported) {
		t.Errorf("ScrubGPU on NVMe: %v", err)
	}

	// Image names are relative to the firmware directory, as devlink's.
	img := "fw.bin"
	os.MkdirAll(s.FirmwareDir(), 0o755)
	os.WriteFile(filepath.Join(s.FirmwareDir(), img), []byte("firmware"), 0o644)
	if err := s.FlashFirmware(ctx, "0000:3b:00.0", hardware.FirmwareImage{Path: filepath.Join(s.FirmwareDir(), img), Version: "22.36.1010"}, nil); err == nil {
		t.Error("an absolute image path was flashed")
	}
	if err := s.FlashFirmware(ctx, "0000:3b:00.0", hardware.FirmwareImage{Path: img, Version: "22.36.1010"}, nil); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Discover(ctx, "0000:3b:00.0"); d.Capabilities["nic.firmware.fw.version"].Equal(hardware.Ordered("22.36.1010")) {
		t.Error("flashed firmware runs before activation")
	}
	if err := s.ActivateFirmware(ctx, "0000:3b:00.0"); err != nil {
		t.Fatal(err)
	}
	d, _ := s.Discover(ctx, "0000:3b:00.0")
	if diff := cmp.Diff(hardware.Ordered("22.36.1010"), d.Capabilities["nic.firmware.fw.version"]); diff != "" {
		t.Errorf("firmware after flash (-want +got):\n%s", diff)
	}

	prev, err := s.BindDriver(ctx, "0000:82:00.0", "nvme")
	if err != nil || prev != "vfio-pci" {
		t.Fatalf("BindDriver = %q, %v", prev, err)
	}
	d, _ = s.Discover(ctx, "0000:82:00.0")
	if d.Driver != "nvme" || d.NVMe.BoundToVFIO || len(d.NVMe.Namespaces) != 1 {
		t.Errorf("after bind to nvme: driver %q nvme %+v", d.Driver, d.NVMe)
	}
	if err := s.ResetFunction(ctx, "0000:82:00.0"); err != nil {
		t.Fatal(err)
	}
}

func TestSimulatorFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := newSim(t, dir)
	addr := hardware.Address("0000:81:00.0")
	media, _ := s.Media(ctx, addr)

	// A fault file injects into a running simulator (another process in e2e).
	f := FaultFile(dir, addr, FaultFail, "sanitize")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Sanitize(ctx, addr, hardware.SanitizeBlock, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "fail-sanitize") {
		t.Errorf("fail-sanitize file: %v", err)
	}
	if !bytes.HasPrefix(read(t, media[0].Path), []byte(TenantPattern)) {
		t.Error("a failed sanitize must leave the media untouched")
	}
	os.Remove(f)
	if err := s.Sanitize(ctx, addr, hardware.SanitizeBlock, 0, nil); err != nil {
		t.Fatalf("after removing the fault file: %v", err)
	}

	// hang: only the deadline ends it (however slow the machine, a hang
	// ends with the deadline: no race).
	s.SetFault(addr, "format", FaultHang)
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := s.Format(short, addr, "nvme0n1", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang-format: %v", err)
	}
	s.SetFault(addr, "format", "")

	// slow: ten progress steps, and ended by its deadline mid-way. The
	// steps are the test's clock: each ends when the test says.
	if err := os.WriteFile(FaultFile(dir, "0000:41:00.0", FaultSlow, "scrub-gpu"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	steps := 0
	s.after = func(d time.Duration) <-chan time.Time {
		if d != s.cfg.Step {
			t.Errorf("a slow step of %v, want SimConfig.Step %v", d, s.cfg.Step)
		}
		steps++
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	var reports []float64
	if err := s.ScrubGPU(ctx, "0000:41:00.0", func(p float64) { reports = append(reports, p) }); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 10 || reports[0] < 0.09 || reports[0] > 0.11 || reports[9] != 1 || steps != 10 {
		t.Errorf("slow scrub progress %v after %d steps", reports, steps)
	}
	// The deadline passes during the fourth step, which never ends.
	mid := testkit.NewDeadline(ctx)
	steps, reports = 0, nil
	s.after = func(time.Duration) <-chan time.Time {
		steps++
		c := make(chan time.Time, 1)
		if steps < 4 {
			c <- time.Time{}
		} else {
			mid.Expire()
		}
		return c
	}
	if err := s.ScrubGPU(mid, "0000:41:00.0", func(p float64) { reports = append(reports, p) }); !errors.Is(err, context.DeadlineExceeded) || len(reports) != 3 {
		t.Errorf("slow scrub past deadline: %v after progress %v", err, reports)
	}

	// Faults from config.
	cfg := testConfig(t.TempDir())
	cfg.Simulator.Devices[0].Faults = map[string]string{"smart-log": FaultFail}
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SmartLog(ctx, addr); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("config fault: %v", err)
	}
}
