package claims

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/scour-project/scour/internal/fscheck"
)

// CheckPaths reports, creating nothing, what in c's paths would stop
// scourd at start: the sqlite file's directory (driver sqlite) and the
// signing key's must be creatable, an existing signing key readable and
// usable (CheckKey). Every problem is in the error.
func (c Config) CheckPaths() error {
	var errs []error
	if c.Driver == DriverSQLite {
		if err := fscheck.WritableDir(filepath.Dir(c.SQLitePath())); err != nil {
			errs = append(errs, fmt.Errorf("claims.state_path: the claims database %s: %w (fix the directory, or set claims.state_path / claims.claim_db)", c.SQLitePath(), err))
		}
	}
	if err := CheckKey(c.SigningKeyPath()); err != nil {
		errs = append(errs, fmt.Errorf("claims.signing_key: %w", err))
	}
	return errors.Join(errs...)
}

// CheckKey reports, creating nothing, what would stop LoadOrCreateKey(path):
// an existing key it cannot read or would refuse, or a missing one whose
// directory cannot be created or written.
func CheckKey(path string) error {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		if err := fscheck.WritableDir(filepath.Dir(path)); err != nil {
			return fmt.Errorf("record signing key %s (scourd creates it at first start): %w", path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("record signing key %s: %w", path, err)
	}
	_, err = loadKey(path, data)
	return err
}
