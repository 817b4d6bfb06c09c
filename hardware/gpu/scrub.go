package gpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Options tune a scrub. Zero values take the defaults.
type Options struct {
	CUDALibrary string  // default libcuda.so.1
	NVMLLibrary string  // default libnvidia-ml.so.1
	MinCoverage float64 // share of the memory CUDA reports that must be scrubbed (default DefaultMinCoverage)
	ChunkBytes  uint64  // first allocation size (default 256 MiB); halves on out of memory
	Pattern     byte    // written before the zeroing pass (default 0xA5)
}

// DefaultMinCoverage is the share of the memory CUDA reports that a
// scrub must write, zero and read back, unless the step or the host says
// otherwise. What stays uncovered is mostly the scrubber's own CUDA
// context (a few hundred MiB: under 1 % of an 80 GB GPU, some 2 % of a
// 16 GB one), which nobody can read through CUDA and which may still hold
// the last tenant's data: 0.97 refuses more than that (another process
// holding memory) and passes a lone context on a 16 GB GPU. Raise it on
// large GPUs (the gpu-scrub step's min_coverage: 0.99 on 80 GB).
const DefaultMinCoverage = 0.97

const (
	defaultChunk   = 256 << 20
	minChunk       = 2 << 20  // the driver's large-page granularity
	minFragment    = 64 << 10 // the smallest allocation tried for the fragments left
	defaultPattern = 0xA5
	readBuffer     = 64 << 20
)

func (o *Options) setDefaults() {
	if o.CUDALibrary == "" {
		o.CUDALibrary = DefaultCUDALibrary
	}
	if o.NVMLLibrary == "" {
		o.NVMLLibrary = DefaultNVMLLibrary
	}
	if o.MinCoverage == 0 {
		o.MinCoverage = DefaultMinCoverage
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = defaultChunk
	}
	if o.Pattern == 0 {
		o.Pattern = defaultPattern
	}
}

// Report is what happened, for the cleaning record. It is filled as far as
// the scrub got, also when Scrub returns an error.
type Report struct {
	BusID             string
	Identity          Identity
	Health            Health
	CUDADriverVersion int // cuDriverGetVersion, 12040 = 12.4

	TotalBytes   uint64 // device memory, as CUDA reports it (cuDeviceTotalMem)
	FreeBytes    uint64 // free after the scrub's own context
	CoveredBytes uint64 // allocated, filled, zeroed and read back
	Chunks       int
	// Fragments are the chunks smaller than the driver's 2 MiB pages,
	// allocated once larger ones no longer fitted.
	Fragments int
	// Scope is NVML's view of the whole GPU (installed memory, MIG).
	Scope   Scope
	Pattern byte
	// NonZeroBytes found when reading back; FirstNonZero is its offset
	// into the scrubbed allocations (-1 when none).
	NonZeroBytes uint64
	FirstNonZero int64
	// Verified: every covered byte read back as zero. It says nothing
	// of the TotalBytes - CoveredBytes bytes the scrub could not
	// allocate (Uncovered).
	Verified bool
	// PinnedReadBuffer: the read-back went through page-locked memory.
	PinnedReadBuffer bool
	MinCoverage      float64
	Duration         time.Duration
}

// Coverage is CoveredBytes / TotalBytes.
func (r *Report) Coverage() float64 {
	if r.TotalBytes == 0 {
		return 0
	}
	return float64(r.CoveredBytes) / float64(r.TotalBytes)
}

// Uncovered is the memory CUDA reports that the scrub neither wrote nor
// read: its own context, the driver's allocations, what no allocation
// could reach.
func (r *Report) Uncovered() uint64 {
	if r.CoveredBytes > r.TotalBytes {
		return 0
	}
	return r.TotalBytes - r.CoveredBytes
}

// stuck holds the bus ids whose scrub is still inside a driver call after
// its ctx ended.
var stuck sync.Map

// Scrub zeroes and verifies the memory of busID ("0000:41:00.0") that it
// can allocate (all it can, not all there is: the report says how much,
// Coverage, and it fails below MinCoverage); the GPU must be bound to the
// nvidia driver. progress (may be nil) gets 0..1. Errors wrap
// ErrUnsupported when the driver libraries or the device are not there,
// ErrScope when the memory CUDA shows may not be the whole GPU's (MIG),
// ErrBusy when an earlier scrub hangs, and ctx.Err() when ctx ended first.
func Scrub(ctx context.Context, busID string, o Options, progress func(float64)) (*Report, error) {
	o.setDefaults()
	if progress == nil {
		progress = func(float64) {}
	}
	if _, busy := stuck.Load(busID); busy {
		return &Report{BusID: busID}, fmt.Errorf("scrub GPU %s: %w; the device stays reserved until this process ends and the GPU is reset", busID, ErrBusy)
	}
	type result struct {
		r   *Report
		err error
	}
	done := make(chan result, 1)
	rep := &Report{BusID: busID, Pattern: o.Pattern, MinCoverage: o.MinCoverage, FirstNonZero: -1}
	start := time.Now()
	stuck.Store(busID, true)
	go func() {
		// A context is current per OS thread: every call runs on this one.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := scrub(ctx, busID, o, rep, progress)
		stuck.Delete(busID)
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		res.r.Duration = time.Since(start)
		return res.r, res.err
	case <-ctx.Done():
		// The worker may be inside a driver call that never returns; it
		// owns rep from here on, so the caller gets a copy of what is known.
		cp := Report{BusID: busID, Pattern: o.Pattern, MinCoverage: o.MinCoverage, FirstNonZero: -1, Duration: time.Since(start)}
		return &cp, fmt.Errorf("scrub GPU %s: no answer from the driver when the step's deadline passed (a hung GPU: the device stays reserved; reset it): %w", busID, ctx.Err())
	}
}
