package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PostgresDSN is the PostgreSQL integration tests use:
// SCOUR_TEST_POSTGRES_DSN, or the local one (trust auth) every
// development and CI machine runs.
func PostgresDSN() string {
	if v := os.Getenv("SCOUR_TEST_POSTGRES_DSN"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

var (
	pgOnce   sync.Once
	pgAdmin  *sql.DB
	pgErr    error
	pgSchema atomic.Int64
)

// PostgresSchema creates an empty schema for one test, dropped when the
// test ends, and returns PostgresDSN pointed at it (pgx sends the unknown
// search_path DSN parameter as a run-time parameter). The test fails when
// PostgreSQL is unreachable; only `go test -short` skips it.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL (run without -short)")
	}
	pgOnce.Do(func() {
		db, err := sql.Open("pgx", PostgresDSN())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
		}
		pgAdmin, pgErr = db, err
	})
	if pgErr != nil {
		t.Fatalf("PostgreSQL at %s is unreachable (start it with scripts/ensure-services.sh or set SCOUR_TEST_POSTGRES_DSN): %v", redact(PostgresDSN()), pgErr)
	}
	schema := fmt.Sprintf("scour_tk%d_%d_%d", os.Getpid(), time.Now().Unix()%100000, pgSchema.Add(1))
	if _, err := pgAdmin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _, _ = pgAdmin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	sep := "?"
	if strings.Contains(PostgresDSN(), "?") {
		sep = "&"
	}
	return PostgresDSN() + sep + "search_path=" + schema
}
