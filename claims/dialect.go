package claims

import (
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect holds the few differences between the two backends. Everything
// else is portable SQL: TEXT ids (UUIDs made here), TEXT timestamps in one
// fixed-width UTC format, INTEGER booleans, JSON as TEXT.
type dialect struct {
	name string
	// forUpdate is appended to SELECTs that read rows the transaction will
	// rewrite (sqlite serializes writers, PostgreSQL needs the row lock).
	forUpdate string
}

var (
	sqliteDialect   = dialect{name: DriverSQLite}
	postgresDialect = dialect{name: DriverPostgres, forUpdate: " FOR UPDATE"}
)

// rebind turns the '?' placeholders the queries are written with into $N
// for PostgreSQL. No query here has a '?' inside a literal.
func (d dialect) rebind(q string) string {
	if d.name != DriverPostgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// retryable reports errors where running the whole transaction again is
// correct: another writer held the lock (sqlite, another process),
// PostgreSQL serialization failures and deadlocks, and unique violations
// from a racing insert of the same key (the retry finds the winner's row).
func retryable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "23505":
			return true
		}
	}
	return false
}
