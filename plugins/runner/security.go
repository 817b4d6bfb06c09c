package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// CheckFile refuses to run path unless it is a regular, executable file
// owned by root, not writable by group or others, inside one of dirs (after
// resolving symlinks), and each dir is itself owned by root and not writable
// by group or others. Anyone who can replace a plugin can wipe any device,
// so these are the same rules sudo and cron apply to what they run.
func CheckFile(path string, dirs []string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("plugin %q: path must be absolute", path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("plugin %q: %w", path, err)
	}
	dir, ok := insideDirs(real, dirs)
	if !ok {
		return fmt.Errorf("plugin %q (resolves to %q) is outside the configured plugin directories %v: move it into one of them or add its directory to plugin_dirs", path, real, dirs)
	}
	if err := checkOwnerMode(dir, "plugin directory"); err != nil {
		return err
	}
	fi, err := os.Stat(real)
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
