package hardware

import "errors"

var (
	// ErrUnsupported: the device cannot do what was asked (no sanitize
	// support, no reset file). Permanent for this device.
	ErrUnsupported = errors.New("not supported by device")
	// ErrToolMissing: the tool needed is not installed on this host.
	ErrToolMissing = errors.New("tool not installed")
)

var (
	// ErrUnknownCapability: a capability name scour does not know and
	// that is not operator-defined (custom.*). Requirements naming one are
	// config errors; declared values naming one are logged and ignored.
	ErrUnknownCapability = errors.New("unknown capability name")
	// ErrWrongDriver: the action needs the device bound to another driver
	// (an NVMe bound to vfio-pci has no controller or block device). The
	// pipeline can BindDriver and retry.
	ErrWrongDriver = errors.New("device is not bound to the driver this action needs")
	// ErrHiddenNamespaces: the controller's subsystem has namespaces that
	// are allocated but attached to no controller that could format them
	// (a tenant with namespace management can create, write and detach
	// one); a format through this controller cannot reach them. On a
	// single-controller subsystem that is any not attached to it; on a
	// multi-controller one (cmic bit 1), only those attached to none,
	// since another controller's namespaces look the same from here.
	// Retrying does not help: the operator must act.
	ErrHiddenNamespaces = errors.New("allocated namespaces not attached to this controller")
	// ErrNoDevice: no PCI function with that address on this host.
	ErrNoDevice = errors.New("no such PCI device on this host")
	// ErrGPUMemoryNotZero: GPU memory read back non-zero after a scrub.
	// Retrying the same scrub does not fix it: the device is quarantined.
	ErrGPUMemoryNotZero = errors.New("GPU memory not zero after the scrub")
	// ErrGPUUnhealthy: NVML reports memory the GPU cannot trust (row
	// remapping failed or pending, pages pending retirement).
	ErrGPUUnhealthy = errors.New("GPU memory health gate failed")
	// ErrGPUScope: the memory a scrub would reach may not be the whole
	// GPU's (MIG mode on, CUDA reporting much less than NVML installed):
	// nothing was written; the device is quarantined until an operator
	// looks (disable MIG, reset).
	ErrGPUScope = errors.New("GPU memory scope check failed")
)
