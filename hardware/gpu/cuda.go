package gpu

import "unsafe"

// cuda is the subset of the CUDA driver API the scrubber calls, using the
// _v2 entry points the driver exports for 64-bit sizes and pointers.
type cuda struct {
	init           func(flags uint32) int32
	driverVersion  func(v *int32) int32
	deviceByBusID  func(dev *int32, busID string) int32
	deviceName     func(name *byte, n int32, dev int32) int32
	deviceTotalMem func(bytes *uint64, dev int32) int32
	ctxCreate      func(ctx *uintptr, flags uint32, dev int32) int32
	ctxDestroy     func(ctx uintptr) int32
	ctxSynchronize func() int32
	memGetInfo     func(free, total *uint64) int32
	memAlloc       func(p *uint64, n uint64) int32
	memFree        func(p uint64) int32
	memsetD8       func(p uint64, v uint8, n uint64) int32
	memcpyDtoH     func(dst unsafe.Pointer, src uint64, n uint64) int32
	memAllocHost   func(p *unsafe.Pointer, n uint64) int32
	memFreeHost    func(p unsafe.Pointer) int32
	errorString    func(code int32, s **byte) int32
}

func loadCUDA(path string) (*cuda, error) {
	lib, err := open(path)
	if err != nil {
		return nil, err
	}
	c := &cuda{}
	err = bind(lib, path, []sym{
		{"cuInit", &c.init},
		{"cuDriverGetVersion", &c.driverVersion},
		{"cuDeviceGetByPCIBusId", &c.deviceByBusID},
		{"cuDeviceGetName", &c.deviceName},
		{"cuDeviceTotalMem_v2", &c.deviceTotalMem},
		{"cuCtxCreate_v2", &c.ctxCreate},
		{"cuCtxDestroy_v2", &c.ctxDestroy},
		{"cuCtxSynchronize", &c.ctxSynchronize},
		{"cuMemGetInfo_v2", &c.memGetInfo},
		{"cuMemAlloc_v2", &c.memAlloc},
		{"cuMemFree_v2", &c.memFree},
		{"cuMemsetD8_v2", &c.memsetD8},
		{"cuMemcpyDtoH_v2", &c.memcpyDtoH},
		{"cuMemAllocHost_v2", &c.memAllocHost},
		{"cuMemFreeHost", &c.memFreeHost},
		{"cuGetErrorString", &c.errorString},
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// check turns a CUresult into an error naming the call.
func (c *cuda) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	var s *byte
	msg := "unknown"
	if c.errorString(code, &s) == 0 && s != nil {
		msg = goString(s)
	}
	return &cuError{call: call, code: code, msg: msg}
}

// goString copies a NUL-terminated C string the driver owns.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// hostBuffer is n bytes of page-locked host memory, which device-to-host
// copies fill at full bus speed (pageable memory goes through a staging
// copy), or ordinary memory when the driver cannot pin that much.
func (c *cuda) hostBuffer(n uint64) (buf []byte, pinned bool, free func()) {
	var p unsafe.Pointer
	if c.memAllocHost(&p, n) == 0 && p != nil {
		return unsafe.Slice((*byte)(p), n), true, func() { c.memFreeHost(p) }
	}
	return make([]byte, n), false, func() {}
}
