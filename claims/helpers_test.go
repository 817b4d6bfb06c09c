package claims

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/scour-project/scour/internal/testkit"
)

var (
	pgOnce   sync.Once
	pgAdmin  *sql.DB
	pgErr    error
	pgRunID  = fmt.Sprintf("scour_t%d_%d", os.Getpid(), time.Now().Unix()%100000)
	pgSchema atomic.Int64
)

// testDSN is the PostgreSQL the tests use (testkit.PostgresDSN:
// SCOUR_TEST_POSTGRES_DSN or the local one).
func testDSN() string { return testkit.PostgresDSN() }

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	code := m.Run()
	if pgAdmin != nil {
		dropRunSchemas()
		pgAdmin.Close()
	}
	os.Exit(code)
}

// dropRunSchemas removes every schema this test process created, including
// those of tests that failed before their cleanup ran.
func dropRunSchemas() {
	ctx := context.Background()
	rows, err := pgAdmin.QueryContext(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, pgRunID+"%")
	if err != nil {
		return
	}
	var names []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			names = append(names, n)
		}
	}
	rows.Close()
	for _, n := range names {
		_, _ = pgAdmin.ExecContext(ctx, `DROP SCHEMA `+n+` CASCADE`)
	}
}

// needPostgres returns an admin connection, failing the test when
// PostgreSQL is unreachable (skipping only under -short).
func needPostgres(t testing.TB) *sql.DB {
	t.Helper()
	pgOnce.Do(func() {
		db, err := sql.Open("pgx", testDSN())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
		}
		if err != nil {
			pgErr = err
			return
		}
		pgAdmin = db
	})
	if pgErr != nil {
		if testing.Short() {
			t.Skipf("PostgreSQL at %s unreachable and -short given: %v", RedactDSN(testDSN()), pgErr)
		}
		t.Fatalf("PostgreSQL at %s unreachable (start it with scripts/ensure-services.sh, set SCOUR_TEST_POSTGRES_DSN, or run with -short): %v",
			RedactDSN(testDSN()), pgErr)
	}
	return pgAdmin
}

// withSearchPath points a DSN at one schema (pgx sends unknown DSN
// parameters as run-time parameters).
func withSearchPath(dsn, schema string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// backend is one database the shared suite runs against. cfg opens a
// fresh, empty database (a temp file, or a new PostgreSQL schema dropped
// at the end of the test); opening cfg again reopens the same one.
type backend struct {
	name string
	cfg  func(t testing.TB) Config
}

var backends = []backend{
	{name: DriverSQLite, cfg: func(t testing.TB) Config {
		return Config{Driver: DriverSQLite, StatePath: filepath.Join(t.TempDir(), "state")}
	}},
	{name: DriverPostgres, cfg: func(t testing.TB) Config {
		admin := needPostgres(t)
		schema := fmt.Sprintf("%s_%d", pgRunID, pgSchema.Add(1))
		if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
			t.Fatalf("create schema %s: %v", schema, err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
		return Config{Driver: DriverPostgres, DSN: withSearchPath(testDSN(), schema)}
	}},
}

// forEachBackend runs the test body once per backend, in parallel.
func forEachBackend(t *testing.T, body func(t *testing.T, cfg Config)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			body(t, b.cfg(t))
		})
	}
}

func mustOpen(t testing.TB, cfg Config, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg, append([]Option{WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fakeClock is a settable clock for WithClock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func gpuClaim(instance string, rps ...string) Claim {
	c := Claim{Host: "compute-1", Node: "compute-1", InstanceUUID: instance, ProjectID: "proj-a", UserID: "user-a",
		VCPUs: 4, MemoryMB: 8192, DiskGB: 40, MessageID: "msg-" + instance}
	for i, rp := range rps {
		c.PCI = append(c.PCI, PCIDevice{RPUUID: rp, RPName: "compute-1_0000:8" + fmt.Sprint(i) + ":00.0",
			Address: fmt.Sprintf("0000:8%d:00.0", i), ResourceClass: "CUSTOM_NVME_OTU"})
	}
	return c
}

// finish gives the run its verdict; returned is cleaned followed by the
// un-reserve's MarkReturned, as scourd does it.
func finish(ctx context.Context, s *Store, runID string, state RunState, summary string) error {
	if state != RunReturned {
		return s.FinishRun(ctx, runID, state, summary)
	}
	if err := s.FinishRun(ctx, runID, RunCleaned, summary); err != nil {
		return err
	}
	return s.MarkReturned(ctx, runID, summary)
}
