package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CheckFile refuses to run path unless it is a regular, executable file
// owned by root, not writable by group or others, directly inside one of
// dirs, reached without any symlink (path must be its own real path: the
// runner executes exactly the path it checked, and a symlink could be
// re-pointed between the check and the exec), and each dir is itself owned
// by root and not writable by group or others. Every ancestor of the
// plugin directory up to / must be owned by root and not writable by group
// or others, except that a root-owned directory with the sticky bit (like
// /tmp) may be writable by others: there nobody but root can rename or
// replace the root-owned entry below it. Anyone who can replace a plugin
// can wipe any device, so these are the rules sudo applies to what it
// runs.
func CheckFile(path string, dirs []string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("plugin %q: path must be absolute", path)
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("plugin %q does not exist: install it there (plugin_dirs %v) or correct the step's path", path, dirs)
	}
	if err != nil {
		return fmt.Errorf("plugin %q: %w", path, err)
	}
	if real != path {
		return fmt.Errorf("plugin %q is a symlink or has one in its path (it resolves to %q): refusing to run it; configure the real path %q (and a plugin directory without symlinks) instead", path, real, real)
	}
	dir, ok := insideDirs(real, dirs)
	if !ok {
		return fmt.Errorf("plugin %q (resolves to %q) is outside the configured plugin directories %v: move it into one of them or add its directory to plugin_dirs", path, real, dirs)
	}
	if err := checkOwnerMode(dir, "plugin directory"); err != nil {
		return err
	}
	if err := checkAncestors(dir); err != nil {
		return err
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return fmt.Errorf("plugin %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("plugin %q is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("plugin %q is not executable: chmod 0755 it", path)
	}
	return checkOwnerMode(real, "plugin")
}

// checkAncestors checks every parent of dir up to /: owned by root, and not
// writable by group or others unless sticky (then root-owned suffices).
func checkAncestors(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("directory %q above the plugin directory %q: %w", d, dir, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("directory %q above the plugin directory %q: cannot read its owner", d, dir)
		}
		if st.Uid != 0 {
			return fmt.Errorf("directory %q above the plugin directory %q is owned by uid %d, not root: its owner could replace the plugins; refusing to run them (chown root it, or move the plugins)", d, dir, st.Uid)
		}
		if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("directory %q above the plugin directory %q is writable by group or others (mode %04o) without the sticky bit: anyone in it could replace the plugins; refusing to run them (chmod go-w it)", d, dir, fi.Mode().Perm())
		}
		if d == "/" || d == filepath.Dir(d) {
			return nil
		}
	}
}

func checkOwnerMode(path, what string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %q: cannot read its owner", what, path)
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s %q is owned by uid %d, not root: refusing to run it (chown root:root it)", what, path, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s %q is writable by group or others (mode %04o): refusing to run it (chmod go-w it)", what, path, fi.Mode().Perm())
	}
	return nil
}

// insideDirs returns the configured directory (symlinks resolved) that
// contains real.
func insideDirs(real string, dirs []string) (string, bool) {
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		// Only direct children: a sub-directory would be one more
		// directory whose permissions decide what runs.
		if filepath.Dir(real) == rd {
			return rd, true
		}
	}
	return "", false
}
