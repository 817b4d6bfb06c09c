package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/plugins"
)

// Built-in steps against the file-backed simulator: media really gets
// wiped (read back), wear retires, unsupported sanitize fails, a firmware
// image with the wrong hash is refused.

func newSim(t *testing.T, devs ...hardware.SimDevice) *sim.Simulator {
	t.Helper()
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated,
		Simulator: hardware.SimConfig{StateDir: t.TempDir(), Step: time.Millisecond, Devices: devs}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func simRun(t *testing.T, s *sim.Simulator, addr hardware.Address, name string, args map[string]any) (*plugins.Result, error) {
	t.Helper()
	dev, err := s.Discover(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, name, s, dev, args)
}

func media(t *testing.T, s *sim.Simulator, addr hardware.Address) [][]byte {
	t.Helper()
	ms, err := s.Media(context.Background(), addr)
	if err != nil || len(ms) == 0 {
		t.Fatalf("media of %s: %v %v", addr, ms, err)
	}
	var out [][]byte
	for _, m := range ms {
		b, err := os.ReadFile(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func zeros(bs [][]byte) bool {
	for _, b := range bs {
		if len(bytes.Trim(b, "\x00")) != 0 {
			return false
		}
	}
	return true
}

func tenant(bs [][]byte) bool {
	for _, b := range bs {
		if !bytes.Contains(b, []byte(sim.TenantPattern)) {
			return false
		}
	}
	return true
}

const nvmeA, nvmeB, gpu, nic = hardware.Address("0000:81:00.0"), hardware.Address("0000:82:00.0"), hardware.Address("0000:41:00.0"), hardware.Address("0000:3b:00.0")

func simDevices() []hardware.SimDevice {
	return []hardware.SimDevice{
		{Address: string(nvmeA), Kind: hardware.KindNVMe, Namespaces: 2, MediaBytes: 3<<20 + 512, SANICAP: 0b110, PercentUsed: 10},
		{Address: string(nvmeB), Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0, PercentUsed: 95},
		{Address: string(gpu), Kind: hardware.KindGPU, MemoryBytes: 1 << 20},
		{Address: string(nic), Kind: hardware.KindNIC, NICFirmware: map[string]string{"fw": "22.31.1014"}},
	}
}

func TestSimOverwriteAndVerifyWipeMedia(t *testing.T) {
	s := newSim(t, simDevices()...)
	if !tenant(media(t, s, nvmeA)) {
		t.Fatal("simulated media does not start with tenant data")
	}
	if _, err := simRun(t, s, nvmeA, "verify", nil); plugins.CodeOf(err) != plugins.CodePermanent {
		t.Fatalf("verify of dirty media: %v", err)
	}
	res, err := simRun(t, s, nvmeA, "overwrite", map[string]any{"block_size": 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !zeros(media(t, s, nvmeA)) {
		t.Fatal("media not all zeros after overwrite")
	}
	if res.Details["bytes"] != int64(2*(3<<20+512)) {
		t.Fatalf("details %v", res.Details)
	}
	if _, err := simRun(t, s, nvmeA, "verify", map[string]any{"mode": "all"}); err != nil {
		t.Fatalf("verify after overwrite: %v", err)
	}
}

func TestSimSanitize(t *testing.T) {
	s := newSim(t, simDevices()...)
	res, err := simRun(t, s, nvmeA, "nvme-sanitize", map[string]any{"poll": "10ms"})
	if err != nil || res.Details["action"] != "block" {
		t.Fatalf("sanitize: %v %v (sanicap block+overwrite: want block)", res, err)
	}
	if !zeros(media(t, s, nvmeA)) {
		t.Fatal("media not zero after block sanitize")
	}
	// No sanitize support: the step fails clearly and touches nothing.
	_, err = simRun(t, s, nvmeB, "nvme-sanitize", nil)
	if plugins.CodeOf(err) != plugins.CodeUnsupported || !strings.Contains(err.Error(), "supports no sanitize action") {
		t.Fatalf("unsupported sanitize: %v", err)
	}
	if !tenant(media(t, s, nvmeB)) {
		t.Fatal("unsupported sanitize modified the media")
	}
}

func TestSimWearAndFormat(t *testing.T) {
	s := newSim(t, simDevices()...)
	if _, err := simRun(t, s, nvmeA, "nvme-wear-check", nil); err != nil {
		t.Fatalf("healthy drive: %v", err)
	}
	_, err := simRun(t, s, nvmeB, "nvme-wear-check", nil)
	if pe := plugins.AsError(err); pe == nil || pe.Code != plugins.CodeRetire || pe.Details["percent_used"] != 95 {
		t.Fatalf("worn drive: %v", err)
	}
	// fna has no crypto bit: format uses ses 1 (user data erase = zeros).
	res, err := simRun(t, s, nvmeA, "nvme-format", nil)
	if err != nil || res.Details["ses"] != 1 {
		t.Fatalf("format: %v %v", res, err)
	}
	if !zeros(media(t, s, nvmeA)) {
		t.Fatal("media not zero after format -s 1")
	}
}

func TestSimGPUScrubAndReset(t *testing.T) {
	dir := t.TempDir()
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated,
		Simulator: hardware.SimConfig{StateDir: dir, Step: time.Millisecond, Devices: simDevices()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	memFile := filepath.Join(dir, string(gpu), "gpu-memory.img") // the simulator's layout
	if b, _ := os.ReadFile(memFile); !tenant([][]byte{b}) {
		t.Fatalf("GPU memory %s does not start with tenant data", memFile)
	}
	if _, err := simRun(t, s, gpu, "gpu-scrub", nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(memFile); len(b) != 1<<20 || !zeros([][]byte{b}) {
		t.Fatal("GPU memory not zero after scrub")
	}
	if _, err := simRun(t, s, gpu, "pci-reset", nil); err != nil {
		t.Fatal(err)
	}
}

func TestSimFirmwareFlash(t *testing.T) {
	s := newSim(t, simDevices()...)
	img := "mellanox/fw.bin"
	os.MkdirAll(filepath.Join(s.FirmwareDir(), "mellanox"), 0o755)
	os.WriteFile(filepath.Join(s.FirmwareDir(), img), []byte("good image"), 0o644)
	sum := sha256.Sum256([]byte("good image"))
	args := map[string]any{"image": img, "sha256": strings.Repeat("0", 64), "version": "22.36.1010", "component": "fw"}
	_, err := simRun(t, s, nic, "firmware-flash", args)
	if plugins.CodeOf(err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), "refusing to flash") {
		t.Fatalf("hash mismatch: %v", err)
	}
	if v, _ := s.FirmwareVersions(context.Background(), nic); v["fw"] != "22.31.1014" {
		t.Fatalf("firmware changed despite the refused image: %v", v)
	}
	// The simulator, like hardware, runs a flashed image only once
	// activated.
	if err := s.FlashFirmware(context.Background(), nic, hardware.FirmwareImage{Path: img, Version: "22.36.1010", Component: "fw"}, nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.FirmwareVersions(context.Background(), nic); v["fw"] != "22.31.1014" {
		t.Fatalf("firmware runs before activation: %v", v)
	}
	args["sha256"] = hex.EncodeToString(sum[:])
	res, err := simRun(t, s, nic, "firmware-flash", args)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.FirmwareVersions(context.Background(), nic); v["fw"] != "22.36.1010" || res.Details["version_change_proven"] != true {
		t.Fatalf("firmware after flash and activation: %v, %v", v, res.Details)
	}
}

// TestSimResetMethods: the simulator selects reset methods through
// reset_method as the kernel does (it lists flr, like QEMU's NVMe), where
// it used to ignore them and reset "the kernel's way".
func TestSimResetMethods(t *testing.T) {
	s := newSim(t, simDevices()...)
	res, err := simRun(t, s, nvmeA, "pci-reset", map[string]any{"methods": []any{"flr"}})
	if err != nil || res.Details["method"] != "flr" {
		t.Fatalf("flr: %v, %v", res, err)
	}
	// bus is not among the methods (and a root-bus device has no bridge
	// to reset): refused before any reset, as unsupported.
	_, err = simRun(t, s, nvmeA, "pci-reset", map[string]any{"methods": []any{"bus"}})
	if plugins.CodeOf(err) != plugins.CodeUnsupported || !strings.Contains(err.Error(), "not among the device's reset methods") {
		t.Fatalf("bus: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(string(s.FS()), "bus/pci/devices", string(nvmeA), "reset_method"))
	if strings.TrimSpace(string(b)) != "flr" {
		t.Fatalf("reset_method not restored: %q", b)
	}
}
