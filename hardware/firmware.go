package hardware

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultFirmwareDir is where the kernel loads firmware from, and so
// where devlink dev flash finds an image named relative to it
// (Documentation/networking/devlink/devlink-flash.rst).
const DefaultFirmwareDir = "/lib/firmware"

// CheckFirmwareName refuses an image name devlink dev flash cannot take
// as scourd checked it: the kernel resolves the name relative to its
// firmware search path, never scourd's working directory, and refuses
// "..", so an absolute or escaping name would be hashed at one file and
// flashed from another (or not at all).
func CheckFirmwareName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("image: required")
	case filepath.IsAbs(name), slices.Contains(strings.Split(name, "/"), ".."), filepath.Clean(name) != name:
		return fmt.Errorf("image: %q must be a plain path relative to %s (the kernel's firmware search path, which devlink dev flash loads from), without .. or a leading /: put the image under %s and name it relative to it", name, DefaultFirmwareDir, DefaultFirmwareDir)
	}
	return nil
}

// FirmwareDir is the directory FlashFirmware's image names are relative
// to: the kernel's. (The simulator and the fake backend name their own.)
func (r *Real) FirmwareDir() string { return DefaultFirmwareDir }
