package gpu

import (
	"context"
	"fmt"
	"unsafe"
)

// scrub runs on a locked OS thread and fills rep as it goes.
func scrub(ctx context.Context, busID string, o Options, rep *Report, progress func(float64)) error {
	nv, err := loadNVML(o.NVMLLibrary)
	if err != nil {
		return err
	}
	id, h, scope, err := nv.query(busID)
	rep.Identity, rep.Health, rep.Scope = id, h, scope
	if err != nil {
		return err
	}
	if p := h.Problem(); p != "" {
		return fmt.Errorf("GPU %s: %w: %s", busID, ErrHealth, p)
	}
	if scope.MIG == "enabled" {
		return fmt.Errorf("GPU %s: %w: MIG mode is enabled: the CUDA device the bus id resolves to is one MIG instance, a slice of the memory, and the rest would keep what the last tenant left; nothing was written, the device stays reserved (quarantined): disable MIG (nvidia-smi -i %s -mig 0, then reset the GPU) and release it",
			busID, ErrScope, busID)
	}
	err = session(ctx, busID, o, 0, func(s *sess) error {
		var ver int32
		if s.cu.driverVersion(&ver) == 0 {
			rep.CUDADriverVersion = int(ver)
		}
		if err := s.cu.check("cuDeviceTotalMem_v2", s.cu.deviceTotalMem(&rep.TotalBytes, s.dev)); err != nil {
			return err
		}
		rep.FreeBytes, rep.Chunks = s.free, len(s.chunks)
		for _, c := range s.chunks {
			rep.CoveredBytes += c.n
			if c.n < minChunk {
				rep.Fragments++
			}
		}
		// Before anything is written: the memory CUDA shows must be the
		// GPU's, not a slice of it.
		if n := scope.NVMLTotalBytes; float64(rep.TotalBytes) < (1-maxScopeGap)*float64(n) {
			return fmt.Errorf("GPU %s: %w: CUDA reports %d bytes of device memory, NVML %d installed (CUDA sees %.1f%%, less than %.0f%% of it): the CUDA device may be a slice of the GPU (MIG, a partition), so a scrub of it would leave the rest as the last tenant left it; nothing was written, the device stays reserved (quarantined)",
				busID, ErrScope, rep.TotalBytes, n, 100*float64(rep.TotalBytes)/float64(n), 100*(1-maxScopeGap))
		}
		return wipe(ctx, s.cu, s.chunks, o.Pattern, rep, progress)
	})
	if err != nil {
		return err
	}
	if cov := rep.Coverage(); cov < o.MinCoverage {
		return fmt.Errorf("GPU %s: scrubbed %d of %d bytes (%.2f%%), below the minimum %.2f%% (the gpu-scrub step's min_coverage, else hardware.gpu_scrub.min_coverage): another process may hold GPU memory; the device stays reserved",
			busID, rep.CoveredBytes, rep.TotalBytes, 100*cov, 100*o.MinCoverage)
	}
	return nil
}

// maxScopeGap is how much less memory CUDA may report than NVML says is
// installed before the scrub refuses: the driver reserves some (public
// figures: about 0.7 % on an H100 80GB, 0.8 % on an A100 80GB, 1.6 % on a
// T4, up to some 2.5 % on 24 GB cards), while a MIG instance other than
// the full one is at most half the memory. Not measured here: no GPU.
const maxScopeGap = 0.05

type chunk struct {
	ptr, n uint64
}

// allocAll allocates up to limit bytes in chunks of size, halving the
// chunk on out of memory down to minFragment: after the large chunks,
// smaller ones take the fragments between them and what cuMemGetInfo did
// not count, until even minFragment no longer fits (each halving costs
// one failed call). Other allocation errors are failures.
func allocAll(ctx context.Context, cu *cuda, limit, size uint64) ([]chunk, error) {
	var out []chunk
	var got uint64
	for got < limit && size >= minFragment {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		n := min(size, limit-got)
		var p uint64
		code := cu.memAlloc(&p, n)
		if code == cudaErrorOutOfMemory {
			size /= 2
			continue
		}
		if err := cu.check(fmt.Sprintf("cuMemAlloc_v2(%d)", n), code); err != nil {
			return out, err
		}
		out = append(out, chunk{p, n})
		got += n
	}
	return out, nil
}

// wipe writes the pattern, spot-checks it, zeroes and reads everything back.
func wipe(ctx context.Context, cu *cuda, chunks []chunk, pattern byte, rep *Report, progress func(float64)) error {
	for i, v := range []byte{pattern, 0} {
		for _, c := range chunks {
			if err := cu.check(fmt.Sprintf("cuMemsetD8_v2(%#x)", v), cu.memsetD8(c.ptr, v, c.n)); err != nil {
				return err
			}
		}
		// cuMemsetD8 may return before the device finished.
		if err := cu.check("cuCtxSynchronize", cu.ctxSynchronize()); err != nil {
			return err
		}
		if v == pattern {
			if err := spotCheck(cu, chunks, pattern); err != nil {
				return err
			}
		}
		progress(0.1 * float64(i+1))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return readBack(ctx, cu, chunks, rep, progress)
}

// spotCheck reads the first and last 4 KiB of each chunk: the pattern
// must be there, proving the writes reached every allocation (a zero
// read-back alone would also pass on memory that was never written).
func spotCheck(cu *cuda, chunks []chunk, pattern byte) error {
	for i, c := range chunks {
		buf := make([]byte, min(4096, c.n))
		for _, off := range []uint64{0, c.n - uint64(len(buf))} {
			if err := cu.check("cuMemcpyDtoH_v2", cu.memcpyDtoH(unsafe.Pointer(&buf[0]), c.ptr+off, uint64(len(buf)))); err != nil {
				return err
			}
			for j, b := range buf {
				if b != pattern {
					return fmt.Errorf("pattern %#x did not reach chunk %d: byte %d reads %#x", pattern, i, off+uint64(j), b)
				}
			}
		}
	}
	return nil
}

// readBack copies every chunk to the host and counts non-zero bytes.
func readBack(ctx context.Context, cu *cuda, chunks []chunk, rep *Report, progress func(float64)) error {
	buf, pinned, free := cu.hostBuffer(readBuffer)
	defer free()
	rep.PinnedReadBuffer = pinned
	var base, done uint64
	for _, c := range chunks {
		for off := uint64(0); off < c.n; off += readBuffer {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(readBuffer, c.n-off)
			if err := cu.check("cuMemcpyDtoH_v2", cu.memcpyDtoH(unsafe.Pointer(&buf[0]), c.ptr+off, n)); err != nil {
				return err
			}
			if k, first := countNonZero(buf[:n]); k > 0 {
				if rep.NonZeroBytes == 0 {
					rep.FirstNonZero = int64(base + off + uint64(first))
				}
				rep.NonZeroBytes += k
			}
			done += n
			progress(0.2 + 0.8*float64(done)/float64(rep.CoveredBytes))
		}
		base += c.n
	}
	if rep.NonZeroBytes > 0 {
		return fmt.Errorf("%w: %d bytes read back non-zero, the first at offset %d of the scrubbed memory; the device stays reserved (retire it if a reset and a new scrub do not clear it)",
			ErrNotZero, rep.NonZeroBytes, rep.FirstNonZero)
	}
	rep.Verified = true
	return nil
}

// countNonZero counts non-zero bytes, skipping zero 8-byte words fast.
func countNonZero(b []byte) (n uint64, first int) {
	first = -1
	words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	for i, w := range words {
		if w == 0 {
			continue
		}
		for j := range 8 {
			if b[i*8+j] != 0 {
				if first < 0 {
					first = i*8 + j
				}
				n++
			}
		}
	}
	for i := len(words) * 8; i < len(b); i++ {
		if b[i] != 0 {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	return n, first
}
