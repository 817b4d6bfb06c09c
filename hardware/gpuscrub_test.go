package hardware

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware/gpu"
	"github.com/scour-project/scour/hardware/gpu/gputest"
	"github.com/scour-project/scour/internal/testkit"
)

// helperRunner runs scour-gpu-scrub for real and answers every other tool
// from the recorded fixtures.
type helperRunner struct {
	Runner
	helper string
}

func (h helperRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if name == h.helper {
		return ExecRunner{}.Run(ctx, name, args...)
	}
	return h.Runner.Run(ctx, name, args...)
}

// gpuReal is the real backend over the fixture tree, whose 0000:41:00.0
// is an NVIDIA GPU on the nvidia driver, with the built-in scrubber and
// the stand-in driver libraries.
func gpuReal(t *testing.T, cudaLib string) *Real {
	l := gputest.Build(t)
	if cudaLib == "" {
		cudaLib = l.CUDA
	}
	h := gputest.Helper(t)
	return newTestReal(t, Config{GPUScrub: GPUScrub{Helper: h, CUDALibrary: cudaLib, NVMLLibrary: l.NVML}},
		helperRunner{fixtureRunner(t, nil), h})
}

func TestRealScrubGPUBuiltIn(t *testing.T) {
	t.Setenv("SCOUR_FAKE_GPU_MEM", "67108864") // its 1 MiB context leaves 98.4 %
	ctx := context.Background()
	b := gpuReal(t, "")
	var progress []float64
	d, err := b.ScrubGPUDetails(ctx, "0000:41:00.0", func(f float64) { progress = append(progress, f) })
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"method": "built-in", "verified": true, "gpu_model": "Stand-in GPU (host memory)",
		"gpu_serial": "STANDIN-0001", "vbios": "00.00.00.00.00", "driver_version": "0.0-standin", "pattern": "0xa5 then 0x00",
		"total_bytes": json.Number("67108864"), "covered_bytes": json.Number("66060288"), "uncovered_bytes": json.Number("1048576"), "ecc": "enabled"} {
		if d[k] != want {
			t.Errorf("details[%q] = %v (%T), want %v", k, d[k], d[k], want)
		}
	}
	if len(progress) != 2 || progress[1] != 1 {
		t.Errorf("progress %v", progress)
	}
	dev, err := b.Discover(ctx, "0000:41:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if v := dev.Capabilities["gpu.scrub"]; v.String() != "true" {
		t.Errorf("gpu.scrub with libcuda loadable = %v, want true", v)
	}
}

// Each failure of the helper maps to the error the step classifies.
func TestRealScrubGPUFailures(t *testing.T) {
	for _, tc := range []struct {
		cuda, nvml string
		want       error
		msg        string
		verified   bool // what it could scrub, it verified
	}{
		{cuda: "stuck-word", want: ErrGPUMemoryNotZero, msg: "8 bytes read back non-zero"},
		{nvml: "remap-failure", want: ErrGPUUnhealthy, msg: "retire the GPU"},
		{cuda: "memset-error", msg: "cuMemsetD8_v2(0xa5): CUDA error 700"},
		{cuda: "alloc-limit=4194304", msg: "below the minimum 97.00%", verified: true},
		{nvml: "mig-enabled", want: ErrGPUScope, msg: "MIG mode is enabled"},
	} {
		t.Run(tc.cuda+tc.nvml, func(t *testing.T) {
			t.Setenv("SCOUR_FAKE_CUDA_FAULT", tc.cuda)
			t.Setenv("SCOUR_FAKE_NVML_FAULT", tc.nvml)
			d, err := gpuReal(t, "").ScrubGPUDetails(context.Background(), "0000:41:00.0", nil)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) ||
				!strings.Contains(err.Error(), "0000:41:00.0") || errors.Is(err, ErrUnsupported) {
				t.Errorf("ScrubGPUDetails = %v, want %v containing %q and the address", err, tc.want, tc.msg)
			}
			if d["verified"] != tc.verified {
				t.Errorf("details say verified %v, want %v: %v", d["verified"], tc.verified, d)
			}
		})
	}
}

// A driver call that never returns: the step's deadline kills the helper
// (its process group) and the step fails with the deadline.
func TestRealScrubGPUHangIsKilledAtTheDeadline(t *testing.T) {
	t.Setenv("SCOUR_FAKE_CUDA_FAULT", "hang")
	// The deadline passes once the helper hangs in the driver call, not
	// at a fixed time a loaded machine may reach before it even started.
	hung := filepath.Join(t.TempDir(), "hung")
	t.Setenv("SCOUR_FAKE_GPU_HUNG", hung)
	b := gpuReal(t, "")
	ctx := testkit.NewDeadline(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := b.ScrubGPUDetails(ctx, "0000:41:00.0", nil)
		ended <- err
	}()
	ctx.ExpireOnFile(t, hung, ended)
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "killed") {
		t.Errorf("hung driver: %v, want the helper killed at the deadline", err)
	}
}

func TestRealScrubGPUNeedsTheNvidiaDriver(t *testing.T) {
	b := gpuReal(t, "")
	link := b.FS().Path("bus/pci/devices/0000:41:00.0/driver")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../bus/pci/drivers/vfio-pci", link); err != nil {
		t.Fatal(err)
	}
	_, err := b.ScrubGPUDetails(context.Background(), "0000:41:00.0", nil)
	if !errors.Is(err, ErrWrongDriver) || !strings.Contains(err.Error(), "driver: nvidia") {
		t.Errorf("GPU on vfio-pci: %v, want ErrWrongDriver saying to give the step driver: nvidia", err)
	}
}

func TestRealScrubGPUWithoutLibcudaIsUnsupported(t *testing.T) {
	b := gpuReal(t, "/nonexistent/libcuda.so.1")
	_, err := b.ScrubGPUDetails(context.Background(), "0000:41:00.0", nil)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Errorf("no libcuda: %v, want ErrUnsupported naming the library", err)
	}
	dev, err := b.Discover(context.Background(), "0000:41:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if v := dev.Capabilities["gpu.scrub"]; v.String() != "false" {
		t.Errorf("gpu.scrub without libcuda = %v, want false", v)
	}
	noHelper := newTestReal(t, Config{GPUScrub: GPUScrub{Helper: "/nonexistent/scour-gpu-scrub"}}, ExecRunner{})
	if _, err := noHelper.ScrubGPUDetails(context.Background(), "0000:41:00.0", nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no helper: %v, want ErrUnsupported", err)
	}
}

// A step's min_coverage reaches the built-in scrubber and replaces the
// host's hardware.gpu_scrub.min_coverage, whose default is the
// scrubber's own.
func TestRealScrubGPUMinCoverageFromTheStep(t *testing.T) {
	if DefaultGPUMinCoverage != gpu.DefaultMinCoverage {
		t.Errorf("hardware.gpu_scrub.min_coverage defaults to %v, the scrubber to %v", DefaultGPUMinCoverage, gpu.DefaultMinCoverage)
	}
	t.Setenv("SCOUR_FAKE_CUDA_FAULT", "alloc-limit=65011712") // 62 of 64 MiB: 96.9 %
	b := gpuReal(t, "")
	if _, err := b.ScrubGPUDetails(context.Background(), "0000:41:00.0", nil); err == nil || !strings.Contains(err.Error(), "below the minimum 97.00%") {
		t.Fatalf("96.9 %% with the host's default: %v, want below the minimum", err)
	}
	d, err := b.ScrubGPUWith(context.Background(), "0000:41:00.0", GPUScrubOptions{MinCoverage: 0.95}, nil)
	if err != nil || d["min_coverage"] != json.Number("0.95") || d["uncovered_bytes"] != json.Number("2097152") {
		t.Fatalf("96.9 %% with the step's 0.95: %v, details %v", err, d)
	}
}
