package hardware

import "errors"

var (
	// ErrUnsupported: the device cannot do what was asked (no sanitize
	// support, no reset file). Permanent for this device.
	ErrUnsupported = errors.New("not supported by device")
	// ErrToolMissing: the tool needed is not installed on this host.
	ErrToolMissing = errors.New("tool not installed")
)
