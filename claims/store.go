package claims

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Store keeps claims and cleaning records in sqlite or PostgreSQL. It is
// safe for concurrent use; on sqlite every write goes through one
// connection, so writers queue in Go instead of failing with "database is
// locked".
type Store struct {
	cfg Config
	d   dialect
	w   *sql.DB // writes (one connection on sqlite)
	r   *sql.DB // reads
	now func() time.Time
	log *slog.Logger

	upgrade bool
	target  map[string]int // schema versions to create or upgrade to
	signer  *Signer        // signs closed records (scourd); nil: unsigned

	onHead func(ChainHead) // WithChainHead's callback
	headMu sync.Mutex
	heads  map[*sql.Tx][]ChainHead // chain heads a transaction advanced, told after its commit

	lockHost string        // WithHostLock's host; "": no lock
	lockIdle time.Duration // PostgreSQL: an idle lock session ends after this (0: hostLockIdle)
	lock     *hostLock     // held from Open to Close
}

// Option adjusts Open.
type Option func(*Store)

// WithClock replaces time.Now (tests use a fake clock).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// ReadOnlySchema makes Open refuse a database that is not exactly at this
// binary's schema versions instead of creating or upgrading it; scourctl
// uses it so that only scourd ever changes the schema.
func ReadOnlySchema() Option { return func(s *Store) { s.upgrade = false } }

// withTargetVersions stops migrations at the given versions (fixture
// generation).
func withTargetVersions(v map[string]int) Option { return func(s *Store) { s.target = v } }

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// Open validates cfg, opens the database and brings its schema to this
// binary's version (creating it when absent). It refuses a database whose
// schema is newer than the binary (ErrSchemaTooNew).
func Open(ctx context.Context, cfg Config, opts ...Option) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, now: time.Now, log: slog.Default(), upgrade: true, target: LatestVersions()}
	for _, o := range opts {
		o(s)
	}
	var err error
	switch cfg.Driver {
	case DriverSQLite:
		err = s.openSQLite(ctx)
	case DriverPostgres:
		err = s.openPostgres(ctx)
	}
	if err != nil {
		return nil, err
	}
	if s.lockHost != "" {
		// Before the schema: a second scourd changes nothing.
		if err := s.takeHostLock(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	if s.upgrade {
		err = s.migrate(ctx, s.target)
	} else {
		err = s.checkCurrent(ctx)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("claims: %s database %s: %w", cfg.Driver, s.where(), err)
	}
	return s, nil
}

// where names the database for error messages, without credentials.
func (s *Store) where() string {
	if s.cfg.Driver == DriverSQLite {
		return s.cfg.SQLitePath()
	}
	return RedactDSN(s.cfg.DSN)
}

// Close releases the host lock and closes the database handles.
func (s *Store) Close() error {
	errs := []error{s.releaseHostLock()}
	if s.r != nil && s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// Config returns the configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// HostHasRecords reports whether the store holds anything of host: a
// claim, a cleaning run, a quarantine or a record-signing key. scourd asks
// it at start to notice that its host name changed under an existing
// store, which would hide all of these from it.
func (s *Store) HostHasRecords(ctx context.Context, host string) (bool, error) {
	var found bool
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT EXISTS (SELECT 1 FROM claims WHERE host = ?)
		OR EXISTS (SELECT 1 FROM cleaning_runs WHERE host = ?)
		OR EXISTS (SELECT 1 FROM quarantines WHERE host = ?)
		OR EXISTS (SELECT 1 FROM record_keys WHERE host = ?)`), host, host, host, host).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("claims: look for host %s's records: %w", host, err)
	}
	return found, nil
}

// writeTx runs fn in a write transaction and commits it, running it again
// when the failure is one where a retry is correct (see retryable). fn
// must therefore have no effects outside tx.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	const attempts = 8
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			t := time.NewTimer(time.Duration(i*i) * 5 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(err, ctx.Err())
			case <-t.C:
			}
		}
		err = s.tryTx(ctx, fn)
		if err == nil || !retryable(err) {
			return err
		}
	}
	return fmt.Errorf("gave up after %d attempts: %w", attempts, err)
}

func (s *Store) tryTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		s.takeHeads(tx)
		return err
	}
	err = tx.Commit()
	heads := s.takeHeads(tx)
	if err == nil && s.onHead != nil {
		for _, h := range heads {
			s.onHead(s.SignHead(h))
		}
	}
	return err
}

// Timestamps are stored as fixed-width UTC text so that they sort and
// compare the same way as strings on both backends.
const tsLayout = "2006-01-02T15:04:05.000000Z"

func formatTS(t time.Time) string { return t.UTC().Format(tsLayout) }

func (s *Store) stamp() string { return formatTS(s.now()) }

func parseTS(v string) (time.Time, error) { return time.Parse(tsLayout, v) }

func parseNullTS(v sql.NullString) (*time.Time, error) {
	if !v.Valid {
		return nil, nil
	}
	t, err := parseTS(v.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
