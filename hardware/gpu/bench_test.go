package gpu

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware/gpu/gputest"
)

// BenchmarkScrubVsMemset (make bench-gpu-scrub) compares the scrub's
// bandwidth (covered bytes over the whole Scrub: pattern, zero, read-back)
// with cuMemsetD8 alone over the same amount of memory, allocated the
// same way, in this process. SCOUR_GPU_BUS_ID names a real GPU (bound to
// nvidia, idle, system libcuda); without it the stand-in driver runs,
// whose numbers mean nothing about GPUs: it proves the harness works.
func BenchmarkScrubVsMemset(b *testing.B) {
	bus := os.Getenv("SCOUR_GPU_BUS_ID")
	var o Options
	what := "real GPU " + bus
	if bus == "" {
		l := gputest.Build(b)
		b.Setenv("SCOUR_FAKE_GPU_MEM", fmt.Sprint(512<<20))
		o, bus, what = Options{CUDALibrary: l.CUDA, NVMLLibrary: l.NVML}, gputest.BusID, "STAND-IN driver (host memory; the ratio says nothing about GPUs)"
	}
	o.setDefaults()
	for b.Loop() {
		rep, err := Scrub(context.Background(), bus, o, nil)
		if err != nil {
			b.Fatalf("scrub: %v", err)
		}
		memset, err := memsetBaseline(bus, o, rep.CoveredBytes)
		if err != nil {
			b.Fatalf("cuMemsetD8 baseline: %v", err)
		}
		scrubBW := float64(rep.CoveredBytes) / rep.Duration.Seconds() / 1e9
		memsetBW := float64(rep.CoveredBytes) / memset.Seconds() / 1e9
		b.ReportMetric(scrubBW, "scrub_GB/s")
		b.ReportMetric(memsetBW, "memset_GB/s")
		b.ReportMetric(scrubBW/memsetBW, "ratio")
		fmt.Printf("bench-gpu-scrub on %s (%s, driver %s): %d bytes covered of %d; scrub %.2f GB/s (%s), cuMemsetD8 %.2f GB/s (%s): ratio %.3f (target >= 0.8 on a real GPU)\n",
			what, rep.Identity.Model, rep.Identity.Driver, rep.CoveredBytes, rep.TotalBytes,
			scrubBW, rep.Duration.Round(time.Millisecond), memsetBW, memset.Round(time.Millisecond), scrubBW/memsetBW)
	}
}

// memsetBaseline times one cuMemsetD8 pass (and the synchronize that
// waits for it) over n bytes allocated as Scrub allocates them.
func memsetBaseline(bus string, o Options, n uint64) (took time.Duration, err error) {
	err = session(context.Background(), bus, o, n, func(s *sess) error {
		cu := s.cu
		start := time.Now()
		for _, c := range s.chunks {
			if err := cu.check("cuMemsetD8_v2", cu.memsetD8(c.ptr, 0, c.n)); err != nil {
				return err
			}
		}
		err := cu.check("cuCtxSynchronize", cu.ctxSynchronize())
		took = time.Since(start)
		return err
	})
	return took, err
}
