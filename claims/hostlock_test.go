package claims

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func openLocked(cfg Config, host string) (*Store, error) {
	return Open(context.Background(), cfg, WithLogger(slog.New(slog.DiscardHandler)), WithHostLock(host))
}

// A second scourd for the same host is refused with an error naming the
// host and what to do; scourctl's read-only open still works beside the
// first; Close gives the lock back so a restart gets it.
func TestHostLockRefusesASecondScourd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		first, err := openLocked(cfg, "compute-1")
		if err != nil {
			t.Fatalf("first scourd: %v", err)
		}
		second, err := openLocked(cfg, "compute-1")
		if err == nil {
			second.Close()
			first.Close()
			t.Fatal("a second scourd for compute-1 opened the store while the first holds it")
		}
		if !errors.Is(err, ErrHostLocked) {
			t.Errorf("second scourd: want ErrHostLocked, got %v", err)
		}
		for _, want := range []string{"another scourd for host compute-1 holds", "stop it, or give each host its own `host`"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		reader := mustOpen(t, cfg, ReadOnlySchema())
		if _, err := reader.ListRuns(context.Background(), RunFilter{Host: "compute-1"}); err != nil {
			t.Errorf("scourctl's read-only store beside scourd: %v", err)
		}
		if err := first.CheckHostLock(context.Background()); err != nil {
			t.Errorf("CheckHostLock of the holder: %v", err)
		}
		if err := first.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		restarted, err := openLocked(cfg, "compute-1")
		if err != nil {
			t.Fatalf("restart after Close: %v", err)
		}
		restarted.Close()
	})
}

func TestHostLockSQLiteNamesTheHolder(t *testing.T) {
	cfg := backends[0].cfg(t)
	cfg.SetDefaults()
	first, err := openLocked(cfg, "compute-1")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = openLocked(cfg, "compute-1")
	if want := cfg.SQLitePath() + ".lock (pid "; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not name the lock file and holder %q", err, want)
	}
}

func TestHostLockPostgresHostsAreIndependent(t *testing.T) {
	cfg := backends[1].cfg(t)
	a, err := openLocked(cfg, "compute-1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openLocked(cfg, "compute-2")
	if err != nil {
		t.Fatalf("compute-2 beside compute-1 on one database: %v", err)
	}
	defer b.Close()
	_, err = openLocked(cfg, "compute-2")
	if !errors.Is(err, ErrHostLocked) || !strings.Contains(err.Error(), "held by backend pid") {
		t.Errorf("second compute-2: want ErrHostLocked naming the holding backend, got %v", err)
	}
}

// The advisory lock goes with its session: when that session ends,
// CheckHostLock says so (scourd then stops) and another scourd gets it.
func TestHostLockPostgresSessionLost(t *testing.T) {
	ctx := context.Background()
	cfg := backends[1].cfg(t)
	s, err := openLocked(cfg, "compute-1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pid int
	if err := s.lock.conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := needPostgres(t).ExecContext(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckHostLock(ctx); !errors.Is(err, ErrHostLockLost) || !strings.Contains(err.Error(), "compute-1") {
		t.Errorf("CheckHostLock after the session ended: want ErrHostLockLost naming compute-1, got %v", err)
	}
	other, err := openLocked(cfg, "compute-1")
	if err != nil {
		t.Fatalf("another scourd after the session ended: %v", err)
	}
	other.Close()
}

// A scourd whose machine died never closes its connection: PostgreSQL
// ends the lock's session once it has been idle for the lock's idle time
// (a live scourd pings it every few seconds), so the restarted scourd
// gets its host back instead of being refused for hours.
func TestHostLockPostgresOrphanedSessionEnds(t *testing.T) {
	cfg := backends[1].cfg(t)
	s, err := Open(context.Background(), cfg, WithLogger(slog.New(slog.DiscardHandler)), WithHostLock("compute-1"),
		func(s *Store) { s.lockIdle = 300 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		other, err := openLocked(cfg, "compute-1")
		if err == nil {
			other.Close()
			break
		}
		if !errors.Is(err, ErrHostLocked) || time.Now().After(deadline) {
			t.Fatalf("the restarted scourd, while the silent holder's session idles: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.CheckHostLock(context.Background()); !errors.Is(err, ErrHostLockLost) {
		t.Errorf("the silent holder's CheckHostLock: want ErrHostLockLost, got %v", err)
	}
}
