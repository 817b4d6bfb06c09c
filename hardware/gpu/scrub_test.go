package gpu_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware/gpu"
	"github.com/scour-project/scour/hardware/gpu/gputest"
	"github.com/scour-project/scour/internal/testkit"
)

const mib = 1 << 20

// standIn points the scrubber at the stand-in libraries with a 64 MiB GPU
// and the given faults. The environment is process-wide: these tests do
// not run in parallel.
func standIn(t *testing.T, cudaFault, nvmlFault string) gpu.Options {
	t.Helper()
	l := gputest.Build(t)
	t.Setenv("SCOUR_FAKE_GPU_MEM", "67108864")
	t.Setenv("SCOUR_FAKE_CUDA_FAULT", cudaFault)
	t.Setenv("SCOUR_FAKE_NVML_FAULT", nvmlFault)
	return gpu.Options{CUDALibrary: l.CUDA, NVMLLibrary: l.NVML, ChunkBytes: 8 * mib}
}

func TestScrubZeroesAndVerifiesAllFreeMemory(t *testing.T) {
	o := standIn(t, "", "")
	var last float64
	r, err := gpu.Scrub(context.Background(), gputest.BusID, o, func(f float64) { last = f })
	if err != nil {
		t.Fatalf("Scrub: %v", err)
	}
	// The stand-in's context takes 1 MiB, like a real context takes some.
	if r.TotalBytes != 64*mib || r.FreeBytes != 63*mib || r.CoveredBytes != 63*mib {
		t.Errorf("total/free/covered = %d/%d/%d, want 64/63/63 MiB", r.TotalBytes, r.FreeBytes, r.CoveredBytes)
	}
	if !r.Verified || r.NonZeroBytes != 0 || r.FirstNonZero != -1 || r.Pattern != 0xA5 || !r.PinnedReadBuffer {
		t.Errorf("verified %v, non-zero %d at %d, pattern %#x", r.Verified, r.NonZeroBytes, r.FirstNonZero, r.Pattern)
	}
	// 7 of 8 MiB, then 4, 2 and 1 MiB as the allocation is tried until
	// even the smallest fragment fails.
	if r.Chunks != 10 || r.Fragments != 1 || last != 1 {
		t.Errorf("chunks %d (want 10: 7 of 8 MiB, 4, 2, 1), fragments %d (want 1), last progress %v", r.Chunks, r.Fragments, last)
	}
	want := gpu.Identity{Model: "Stand-in GPU (host memory)", Serial: "STANDIN-0001", VBIOS: "00.00.00.00.00", Driver: "0.0-standin"}
	if r.Identity != want || r.Health.ECC != "enabled" || r.CUDADriverVersion != 12040 {
		t.Errorf("identity %+v ecc %q cuda %d", r.Identity, r.Health.ECC, r.CUDADriverVersion)
	}
}

func TestScrubMissingLibraryIsUnsupported(t *testing.T) {
	o := standIn(t, "", "")
	for name, o := range map[string]gpu.Options{
		"cuda": {CUDALibrary: "/nonexistent/libcuda.so.1", NVMLLibrary: o.NVMLLibrary},
		"nvml": {CUDALibrary: o.CUDALibrary, NVMLLibrary: "/nonexistent/libnvidia-ml.so.1"},
	} {
		_, err := gpu.Scrub(context.Background(), gputest.BusID, o, nil)
		if !errors.Is(err, gpu.ErrUnsupported) || !strings.Contains(err.Error(), "/nonexistent/") {
			t.Errorf("%s missing: %v, want ErrUnsupported naming the library", name, err)
		}
	}
}

func TestScrubUnknownBusIDIsUnsupported(t *testing.T) {
	o := standIn(t, "", "")
	_, err := gpu.Scrub(context.Background(), "0000:99:00.0", o, nil)
	if !errors.Is(err, gpu.ErrUnsupported) || !strings.Contains(err.Error(), "0000:99:00.0") {
		t.Errorf("unknown GPU: %v, want ErrUnsupported naming it", err)
	}
}

// Each fault must fail the scrub closed, with the report saying how far
// it got.
func TestScrubFaultsFailClosed(t *testing.T) {
	for _, tc := range []struct {
		cuda, nvml string
		want       string
		check      func(*testing.T, *gpu.Report)
	}{
		{cuda: "alloc-limit=33554432", want: "below the minimum 97.00%", check: func(t *testing.T, r *gpu.Report) {
			if r.CoveredBytes != 32*mib || !r.Verified {
				t.Errorf("covered %d verified %v: the part it could allocate is still scrubbed", r.CoveredBytes, r.Verified)
			}
		}},
		{cuda: "alloc-error", want: "cuMemAlloc_v2(8388608): CUDA error 999"},
		{cuda: "memset-error", want: "cuMemsetD8_v2(0xa5): CUDA error 700 (an illegal memory access", check: func(t *testing.T, r *gpu.Report) {
			if r.Verified {
				t.Error("verified after a failed memset")
			}
		}},
		{cuda: "stuck-word", want: "80 bytes read back non-zero", check: func(t *testing.T, r *gpu.Report) {
			// The stand-in keeps the middle word of each of the 10 chunks.
			if r.Verified || r.NonZeroBytes != 10*8 || r.FirstNonZero != 4*mib {
				t.Errorf("verified %v non-zero %d first %d", r.Verified, r.NonZeroBytes, r.FirstNonZero)
			}
		}},
		{nvml: "remap-pending", want: "row remappings pending: reset the GPU"},
		{nvml: "remap-failure", want: "retire the GPU"},
		{nvml: "retired-pending", want: "pages pending retirement"},
	} {
		t.Run(tc.cuda+tc.nvml, func(t *testing.T) {
			o := standIn(t, tc.cuda, tc.nvml)
			r, err := gpu.Scrub(context.Background(), gputest.BusID, o, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, gpu.ErrUnsupported) {
				t.Fatalf("Scrub = %v, want a failure containing %q", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestScrubHangEndsWithContextAndBlocksTheGPU(t *testing.T) {
	o := standIn(t, "hang", "")
	// Its own bus id: the hung call keeps it busy for the whole process.
	const bus = "0000:42:00.0"
	t.Setenv("SCOUR_FAKE_GPU_BUSID", bus)
	// The deadline passes once the driver call hangs, not at a fixed time
	// that a loaded machine may reach before the call (the scrub would
	// then stop between calls and leave the GPU free).
	hung := filepath.Join(t.TempDir(), "hung")
	t.Setenv("SCOUR_FAKE_GPU_HUNG", hung)
	ctx := testkit.NewDeadline(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := gpu.Scrub(ctx, bus, o, nil)
		ended <- err
	}()
	ctx.ExpireOnFile(t, hung, ended)
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung driver: %v, want the deadline", err)
	}
	_, err := gpu.Scrub(context.Background(), bus, o, nil)
	if !errors.Is(err, gpu.ErrBusy) {
		t.Fatalf("scrub after a hang: %v, want ErrBusy", err)
	}
}
