package claims

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
)

// openSQLite opens two handles on the file: a single-connection writer
// whose transactions start with BEGIN IMMEDIATE (so a transaction that
// reads then writes never has to upgrade its lock and fail), and a reader
// pool that WAL lets run beside it.
func (s *Store) openSQLite(ctx context.Context) error {
	s.d = sqliteDialect
	path := s.cfg.SQLitePath()
	if !s.upgrade {
		// A reader (scourctl) never creates the database.
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("claims: no claims database at %s (check --state-path/--db, or the host's state_path and claim_db): %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("claims: create state directory %s: %w", filepath.Dir(path), err)
	}
	// Create the file ourselves so it gets 0600; sqlite gives its -wal and
	// -shm files the database file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("claims: open %s: %w (check state_path and its permissions)", path, err)
	}
	f.Close()
	pragmas := url.Values{}
	for _, p := range []string{
		"busy_timeout(10000)",
		"journal_mode(WAL)",
		"synchronous(FULL)", // a committed claim survives power loss, not just a crash
		"foreign_keys(1)",
	} {
		pragmas.Add("_pragma", p)
	}
	w := maps.Clone(pragmas)
	w.Set("_txlock", "immediate")
	drv := &sqlite.Driver{}
	s.w = sql.OpenDB(stmtCacheConnector{dsn: "file:" + path + "?" + w.Encode(), drv: drv})
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxLifetime(0)
	s.r = sql.OpenDB(stmtCacheConnector{dsn: "file:" + path + "?" + pragmas.Encode(), drv: drv})
	s.r.SetMaxOpenConns(4)
	if err := s.w.PingContext(ctx); err != nil {
		s.Close()
		return fmt.Errorf("claims: open sqlite %s: %w", path, err)
	}
	return nil
}
