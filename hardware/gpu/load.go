package gpu

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// Default library names: the sonames the NVIDIA driver package installs.
const (
	DefaultCUDALibrary = "libcuda.so.1"
	DefaultNVMLLibrary = "libnvidia-ml.so.1"
)

// open dlopens a library; a library that is absent is ErrUnsupported.
// Libraries are never closed: the NVIDIA driver libraries do not support
// being unloaded, and dlopen of an open library only counts a reference.
func open(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, fmt.Errorf("load %s (is the NVIDIA driver installed?): %v: %w", path, err, ErrUnsupported)
	}
	return h, nil
}

// sym is one symbol to bind: its name and a pointer to a func variable.
type sym struct {
	name string
	fn   any
}

// bind resolves every symbol, reporting the missing ones together
// (RegisterLibFunc would panic on the first).
func bind(lib uintptr, path string, syms []sym) error {
	var missing []string
	for _, s := range syms {
		p, err := purego.Dlsym(lib, s.name)
		if err != nil {
			missing = append(missing, s.name)
			continue
		}
		purego.RegisterFunc(s.fn, p)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %v (driver too old?): %w", path, missing, ErrUnsupported)
	}
	return nil
}

// cstr turns a NUL-terminated buffer into a string.
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Available reports whether the CUDA driver library at path loads with
// every entry point the scrubber needs (nil), or why not (wrapping
// ErrUnsupported). It does not initialise the driver or touch a GPU.
func Available(path string) error {
	if path == "" {
		path = DefaultCUDALibrary
	}
	_, err := loadCUDA(path)
	return err
}
