package gpu

import (
	"errors"
	"fmt"
)

// ErrUnsupported: the NVIDIA driver libraries cannot be loaded on this
// host, or the device is not an NVIDIA GPU the driver sees. The hardware
// package maps it to hardware.ErrUnsupported, which a step's
// on_unsupported decides about.
var ErrUnsupported = errors.New("built-in GPU scrub unsupported")

// ErrBusy: an earlier scrub of the same GPU is still inside a driver call
// that did not return (a hang); the device must stay reserved.
var ErrBusy = errors.New("an earlier scrub of this GPU is stuck in the driver")

// ErrNotZero: memory read back non-zero after the zeroing pass.
var ErrNotZero = errors.New("GPU memory not zero after the scrub")

// ErrHealth: NVML reports memory the GPU cannot trust (remapping failed or
// pending, pages pending retirement).
var ErrHealth = errors.New("GPU memory health gate")

// ErrScope: the memory the scrub would reach through CUDA may not be the
// whole GPU's (MIG mode on, CUDA reporting much less memory than NVML
// installed, NVML unable to say): nothing is written, and the device must
// stay reserved until an operator looks.
var ErrScope = errors.New("GPU memory scope check")

// cuError is a CUDA driver API failure.
type cuError struct {
	call string
	code int32
	msg  string
}

func (e *cuError) Error() string {
	return fmt.Sprintf("%s: CUDA error %d (%s)", e.call, e.code, e.msg)
}

const (
	cudaErrorOutOfMemory   = 2
	cudaErrorInvalidDevice = 101
	cudaErrorNoDevice      = 100
)
