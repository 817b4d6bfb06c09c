package gpu

import (
	"context"
	"fmt"
	"runtime"
)

// sess is a CUDA context on one GPU with memory allocated.
type sess struct {
	cu     *cuda
	dev    int32
	free   uint64 // cuMemGetInfo after the context was created
	chunks []chunk
}

// session runs f with a context on busID and limit bytes (0: all it can
// allocate, until allocation fails) allocated in chunks, then frees
// everything. Errors finding the GPU wrap ErrUnsupported: nothing was
// touched yet.
func session(ctx context.Context, busID string, o Options, limit uint64, f func(*sess) error) error {
	o.setDefaults()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cu, err := loadCUDA(o.CUDALibrary)
	if err != nil {
		return err
	}
	s := &sess{cu: cu}
	if err := cu.check("cuInit", cu.init(0)); err != nil {
		return fmt.Errorf("%v: %w", err, ErrUnsupported)
	}
	if err := cu.check("cuDeviceGetByPCIBusId("+busID+")", cu.deviceByBusID(&s.dev, busID)); err != nil {
		return fmt.Errorf("%v (bound to nvidia, not hidden by CUDA_VISIBLE_DEVICES, MIG off?): %w", err, ErrUnsupported)
	}
	var cctx uintptr
	if err := cu.check("cuCtxCreate_v2", cu.ctxCreate(&cctx, 0, s.dev)); err != nil {
		return err
	}
	defer cu.ctxDestroy(cctx)
	var total uint64
	if err := cu.check("cuMemGetInfo_v2", cu.memGetInfo(&s.free, &total)); err != nil {
		return err
	}
	if limit == 0 {
		// Not only what cuMemGetInfo calls free: allocate until even the
		// smallest fragment fails, bounded by the device's total.
		limit = total
	}
	s.chunks, err = allocAll(ctx, cu, limit, o.ChunkBytes)
	defer func() {
		for _, c := range s.chunks {
			cu.memFree(c.ptr)
		}
	}()
	if err != nil {
		return err
	}
	return f(s)
}
