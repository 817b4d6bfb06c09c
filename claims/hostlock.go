package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrHostLocked means another process holds the host's lock: two scourds
// would clean the same devices at once, each taking the other's run as
// its own to resume.
var ErrHostLocked = errors.New("host locked")

// ErrHostLockLost means the PostgreSQL session that held the host's lock
// ended, so another scourd may hold it now.
var ErrHostLockLost = errors.New("host lock lost")

// WithHostLock makes Open take an exclusive lock for host and hold it
// until Close, failing with ErrHostLocked when another process holds it.
// The lock is the store's: on sqlite one per database file (whatever host
// each process names), on PostgreSQL one per host in a database and
// schema. Two processes naming the same host on two stores both get theirs
// (docs/claims.md, One scourd per host).
// scourd uses it; readers (scourctl) do not, so they work beside it. On
// sqlite it is a flock on <claim_db>.lock; on PostgreSQL a session-level
// advisory lock on a connection set aside for it (see CheckHostLock).
func WithHostLock(host string) Option { return func(s *Store) { s.lockHost = host } }

// hostLock is what WithHostLock holds: the lock file (sqlite) or the
// session holding the advisory lock (PostgreSQL).
type hostLock struct {
	file *os.File
	conn *sql.Conn
	key  int64
}

func (s *Store) takeHostLock(ctx context.Context) error {
	if s.d.name == DriverSQLite {
		return s.flockHost()
	}
	return s.advisoryLockHost(ctx)
}

// flockHost takes the lock file next to the database. flock belongs to
// the open file: it goes when scourd exits, however it exits, and a
// second open, even in the same process, conflicts.
func (s *Store) flockHost() error {
	path := s.cfg.SQLitePath() + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("claims: open lock file %s: %w (check state_path and its permissions)", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("claims: %w: another scourd for host %s holds %s (%s); stop it, or give each host its own `host` and state_path (a systemd unit and a container on one machine are one host: run only one of them; a state_path of its own would hide the second from this lock, not keep both from cleaning the host's devices)",
				ErrHostLocked, s.lockHost, path, holderText(string(holder)))
		}
		return fmt.Errorf("claims: lock %s: %w", path, err)
	}
	// Who holds it, for the error a second scourd prints.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	}
	s.lock = &hostLock{file: f}
	return nil
}

func holderText(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "holder unknown"
	}
	return s
}

// advisoryLockHost takes a session-level advisory lock keyed by schema
// and host on a connection kept out of the pool: the lock lives exactly
// as long as that session.
func (s *Store) advisoryLockHost(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("claims: lock host %s: %w", s.lockHost, err)
	}
	var schema string
	var got bool
	err = conn.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema)
	key := hostLockKey(schema, s.lockHost)
	if err == nil {
		err = conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got)
	}
	if err != nil || !got {
		conn.Close()
	}
	if err != nil {
		return fmt.Errorf("claims: lock host %s: %w", s.lockHost, err)
	}
	if !got {
		return fmt.Errorf("claims: %w: another scourd for host %s holds its advisory lock on postgres %s (%s); stop it, or give each host its own `host`",
			ErrHostLocked, s.lockHost, RedactDSN(s.cfg.DSN), s.lockHolder(ctx, key))
	}
	s.lock = &hostLock{conn: conn, key: key}
	s.endOrphanedLockSession(ctx, conn)
	return nil
}

// hostLockIdle is how long the lock's session may stay idle before
// PostgreSQL ends it. A live scourd pings it every few seconds
// (CheckHostLock) once running; before that, its start-up (Keystone,
// Placement, the broker) may take up to a minute, so the bound is well
// above it. A scourd whose machine crashed, rebooted or lost the network
// never closes its connection: the session's TCP keepalives (below) end
// it within about a minute, and this bounds what they cannot see (a
// client whose network stack still answers).
const hostLockIdle = 5 * time.Minute

// endOrphanedLockSession makes PostgreSQL end the lock's session once its
// client is gone: idle_session_timeout (PostgreSQL 14+) and the server's
// TCP keepalives on that one session. Best effort: an older server, or a
// Unix socket, refuses or ignores a setting, and the lock still works.
func (s *Store) endOrphanedLockSession(ctx context.Context, conn *sql.Conn) {
	idle := s.lockIdle
	if idle <= 0 {
		idle = hostLockIdle
	}
	for _, q := range []string{
		fmt.Sprintf(`SET idle_session_timeout = %d`, idle.Milliseconds()),
		`SET tcp_keepalives_idle = 30`, `SET tcp_keepalives_interval = 10`, `SET tcp_keepalives_count = 3`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			s.log.Debug("host lock session setting refused", "setting", q, "err", err)
		}
	}
}

// hostLockKey is the advisory lock's bigint key: 64 bits of hash, so
// that hosts of a large fleet do not collide, and the schema in it, so
// that two scour deployments in one database do not either.
func hostLockKey(schema, host string) int64 {
	h := fnv.New64a()
	h.Write([]byte("scour host lock\x00" + schema + "\x00" + host))
	return int64(h.Sum64())
}

// lockHolder describes the session holding key, best effort (another
// role's client address may be hidden).
func (s *Store) lockHolder(ctx context.Context, key int64) string {
	var pid int
	var client string
	var since time.Time
	err := s.r.QueryRowContext(ctx, `SELECT a.pid, coalesce(host(a.client_addr), 'local socket'), a.backend_start
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid`,
		int64(uint64(key)>>32), int64(uint32(key))).Scan(&pid, &client, &since)
	if err != nil {
		return "holder unknown"
	}
	return "held by backend pid " + strconv.Itoa(pid) + " from " + client + " since " + since.UTC().Format(time.RFC3339)
}

// CheckHostLock reports whether the lock WithHostLock took is still
// held. A flock cannot be lost; an advisory lock goes with its session,
// so this pings that session and returns ErrHostLockLost when it is
// gone (PostgreSQL restarted, the connection broke, an administrator
// ended it). Without WithHostLock it returns nil.
func (s *Store) CheckHostLock(ctx context.Context) error {
	if s.lock == nil || s.lock.conn == nil {
		return nil
	}
	if err := s.lock.conn.PingContext(ctx); err != nil {
		return fmt.Errorf("claims: %w: the postgres session holding host %s's advisory lock on %s ended (%v); another scourd may hold it now",
			ErrHostLockLost, s.lockHost, RedactDSN(s.cfg.DSN), err)
	}
	return nil
}

// releaseHostLock gives the lock back (Close).
func (s *Store) releaseHostLock() error {
	l := s.lock
	if l == nil {
		return nil
	}
	s.lock = nil
	if l.file != nil {
		return l.file.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
	return errors.Join(err, l.conn.Close())
}
