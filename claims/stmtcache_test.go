package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// cachedQueries returns the query texts the connection behind db keeps.
func cachedQueries(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out := map[string]bool{}
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stmtCacheConn)
		if !ok {
			return fmt.Errorf("driver connection is %T, not the statement cache", dc)
		}
		for q := range c.stmts {
			out[q] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStmtCacheKeepsStatementsAndStaysCorrect(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, Config{Driver: DriverSQLite, StatePath: filepath.Join(t.TempDir(), "state")})
	db := s.w
	if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const ins, sel = `INSERT INTO kv (k, v) VALUES (?, ?)`, `SELECT k, v FROM kv WHERE v >= ? ORDER BY k`
	for i := 0; i < 5; i++ {
		if _, err := db.ExecContext(ctx, ins, fmt.Sprintf("k%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	if !cachedQueries(t, db)[ins] {
		t.Fatal("the insert was not kept prepared")
	}

	// A failed execution (a duplicate key) leaves the kept statement
	// usable, with no binding of the failed call left behind.
	if _, err := db.ExecContext(ctx, ins, "k0", 99); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if _, err := db.ExecContext(ctx, ins, "k5", 5); err != nil {
		t.Fatalf("insert after a failed one: %v", err)
	}

	// A rolled-back transaction leaves nothing, and the statement works
	// after it.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, ins, "k6", 6); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// The same query while its own rows are still open (one connection,
	// one transaction): the second use gets a statement of its own, and
	// both result sets are whole.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	outer, err := tx.QueryContext(ctx, sel, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var k string
		var v int
		if err := outer.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		var n int
		inner, err := tx.QueryContext(ctx, sel, v)
		if err != nil {
			t.Fatal(err)
		}
		for inner.Next() {
			n++
		}
		if err := errors.Join(inner.Err(), inner.Close()); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%d", k, n))
	}
	if err := errors.Join(outer.Err(), outer.Close()); err != nil {
		t.Fatal(err)
	}
	if want := "[k0:6 k1:5 k2:4 k3:3 k4:2 k5:1]"; fmt.Sprint(got) != want {
		t.Fatalf("nested reads = %v, want %s", got, want)
	}
	tx.Rollback()

	// Past the bound, queries still run; the cache does not grow.
	for i := 0; i < maxCachedStmts+10; i++ {
		var v int
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT v + %d FROM kv WHERE k = ?`, i), "k1").Scan(&v); err != nil || v != 1+i {
			t.Fatalf("query %d = %d, %v", i, v, err)
		}
	}
	if n := len(cachedQueries(t, db)); n > maxCachedStmts {
		t.Fatalf("%d statements kept, bound %d", n, maxCachedStmts)
	}
	// A script of several statements runs whole and is not kept.
	script := `UPDATE kv SET v = v + 100 WHERE k = 'k1'; UPDATE kv SET v = v + 100 WHERE k = 'k2'`
	if _, err := db.ExecContext(ctx, script); err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := db.QueryRowContext(ctx, `SELECT SUM(v) FROM kv WHERE k IN ('k1', 'k2')`).Scan(&sum); err != nil || sum != 203 {
		t.Fatalf("after the script: sum %d, %v; want 203", sum, err)
	}
	if cachedQueries(t, db)[script] {
		t.Fatal("a multi-statement script was kept")
	}
}
