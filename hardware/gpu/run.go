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
	id, h, err := nv.query(busID)
	rep.Identity, rep.Health = id, h
	if err != nil {
		return err
	}
	if p := h.Problem(); p != "" {
		return fmt.Errorf("GPU %s: %w: %s", busID, ErrHealth, p)
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
		}
		return wipe(ctx, s.cu, s.chunks, o.Pattern, rep, progress)
	})
	if err != nil {
		return err
	}
	if cov := rep.Coverage(); cov < o.MinCoverage {
		return fmt.Errorf("GPU %s: scrubbed %d of %d bytes (%.2f%%), below the configured minimum %.2f%% (hardware.gpu_scrub.min_coverage): another process may hold GPU memory; the device stays reserved",
			busID, rep.CoveredBytes, rep.TotalBytes, 100*cov, 100*o.MinCoverage)
	}
	return nil
}

type chunk struct {
	ptr, n uint64
}

// allocAll allocates free bytes in chunks of size, halving the chunk on
// out of memory down to minChunk (the context and fragmentation leave less
// than cuMemGetInfo says). Other allocation errors are failures.
func allocAll(ctx context.Context, cu *cuda, free, size uint64) ([]chunk, error) {
	var out []chunk
	var got uint64
	for got < free && size >= minChunk {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		n := min(size, free-got)
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
