package hardware

import (
	"fmt"
	"os"
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

// FirmwareFile is the file the kernel loads for name when devlink dev
// flash asks for it: the first regular file of name under the kernel's
// firmware search path, in the kernel's order
// (drivers/base/firmware_loader/main.c): the firmware_class.path
// parameter, /lib/firmware/updates/<release>, /lib/firmware/updates,
// /lib/firmware/<release>, /lib/firmware. A copy of the same name in an
// earlier directory is what gets flashed, so that is the file to check.
// When none exists it is /lib/firmware/<name> (reading it then fails,
// naming the file the operator should provide).
func (r *Real) FirmwareFile(name string) (string, error) {
	if err := CheckFirmwareName(name); err != nil {
		return "", err
	}
	base, release := r.fwBase, r.release
	if base == "" {
		base = DefaultFirmwareDir
	}
	if release == "" {
		b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		release = strings.TrimSpace(string(b))
	}
	var dirs []string
	if b, err := os.ReadFile(r.fs.Path("module", "firmware_class", "parameters", "path")); err == nil {
		if p := strings.TrimSpace(string(b)); p != "" {
			// The kernel looks there first. A directory this scourd
			// cannot see (a container without it mounted) would leave
			// the file the kernel flashes unchecked.
			if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
				return "", fmt.Errorf("the kernel's firmware_class.path is %s, which this scourd cannot read (%v): the kernel would load %s from there first, unchecked; mount it into scourd's container (read-only) or unset the parameter", p, err, name)
			}
			dirs = append(dirs, p)
		}
	}
	if release != "" {
		dirs = append(dirs, filepath.Join(base, "updates", release))
	}
	dirs = append(dirs, filepath.Join(base, "updates"))
	if release != "" {
		dirs = append(dirs, filepath.Join(base, release))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return filepath.Join(base, name), nil
}
