package gpu

import (
	"bytes"
	"context"
	"unsafe"
)

// Fill writes pattern into all free memory of busID and frees it again:
// what a tenant's process leaves behind, for proving a scrub across
// processes (scour-gpu-scrub -fill; make prove-gpu-scrub). Never part of
// a cleaning.
func Fill(ctx context.Context, busID string, o Options, pattern byte) (uint64, error) {
	var n uint64
	err := session(ctx, busID, o, 0, func(s *sess) error {
		for _, c := range s.chunks {
			if err := s.cu.check("cuMemsetD8_v2", s.cu.memsetD8(c.ptr, pattern, c.n)); err != nil {
				return err
			}
			n += c.n
		}
		return s.cu.check("cuCtxSynchronize", s.cu.ctxSynchronize())
	})
	return n, err
}

// Residue allocates all free memory of busID and, without writing it,
// counts the bytes equal to pattern and the non-zero ones: what a new
// tenant could read (scour-gpu-scrub -residue).
func Residue(ctx context.Context, busID string, o Options, pattern byte) (covered, matching, nonZero uint64, err error) {
	err = session(ctx, busID, o, 0, func(s *sess) error {
		cu := s.cu
		buf, _, free := cu.hostBuffer(readBuffer)
		defer free()
		for _, c := range s.chunks {
			for off := uint64(0); off < c.n; off += readBuffer {
				n := min(readBuffer, c.n-off)
				if err := cu.check("cuMemcpyDtoH_v2", cu.memcpyDtoH(unsafe.Pointer(&buf[0]), c.ptr+off, n)); err != nil {
					return err
				}
				matching += uint64(bytes.Count(buf[:n], []byte{pattern}))
				k, _ := countNonZero(buf[:n])
				nonZero += k
			}
			covered += c.n
		}
		return nil
	})
	return covered, matching, nonZero, err
}
