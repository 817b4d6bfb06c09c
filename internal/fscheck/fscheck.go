// Package fscheck answers, without changing anything, whether scourd will
// be able to create what its configuration names: scourd --check-config
// must find an uncreatable directory before systemd starts scourd in a
// loop, and must not create it while looking.
package fscheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// access(2) modes (unistd.h), which package syscall does not name.
const (
	wOK = 0x2
	xOK = 0x1
)

// WritableDir reports why this process could not create dir (as
// os.MkdirAll does) and then create files in it. It creates nothing: dir,
// or else its nearest existing ancestor, must be a directory this process
// may write into and search. The error names the path that stops it and
// the uid it was checked as (root passes permission bits, not a
// read-only file system).
func WritableDir(dir string) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		dir = abs
	}
	p := dir
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a directory: cannot create %s", p, dir)
		case err == nil:
			if err := syscall.Access(p, wOK|xOK); err != nil {
				what := "cannot create files in it"
				if p != dir {
					what = "cannot create " + dir + " in it"
				}
				return fmt.Errorf("%s: %s (%s, checked as uid %d)", p, what, accessReason(err), os.Geteuid())
			}
			return nil
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			parent := filepath.Dir(p)
			if parent == p {
				return fmt.Errorf("cannot create %s: %w", dir, err)
			}
			p = parent
		default:
			return fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
}

func accessReason(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "read-only file system"
	case errors.Is(err, syscall.EACCES):
		return "permission denied"
	}
	return err.Error()
}
