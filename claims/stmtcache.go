package claims

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"

	"modernc.org/sqlite"
)

// The sqlite driver prepares a statement's SQL again at every Exec and
// Query on a connection (about a sixth of the store's CPU). Its prepared
// statements keep their compiled form, but database/sql can only reuse a
// *sql.Stmt prepared on the database, which needs a free connection: the
// writer has one, held by the transaction that wants the statement. So
// each connection keeps its own statements, by query text, below
// database/sql, as drivers with a statement cache do (mattn/go-sqlite3's
// _stmt_cache_size).

// maxCachedStmts bounds a connection's statements. The store's queries
// come from a few dozen templates; a query text beyond the bound (one
// built with a variable list) is prepared and closed at each use as
// before.
const maxCachedStmts = 128

// stmtCacheConnector opens sqlite connections that keep their statements.
type stmtCacheConnector struct {
	dsn string
	drv *sqlite.Driver
}

func (c stmtCacheConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, errors.New("claims: the sqlite driver's connection lacks the context interfaces the statement cache needs")
	}
	return &stmtCacheConn{sqliteConn: inner, stmts: map[string]*cachedStmt{}}, nil
}

func (c stmtCacheConnector) Driver() driver.Driver { return c.drv }

// sqliteConn is what database/sql uses of the driver's connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// stmtCacheConn is used by one goroutine at a time (database/sql's
// guarantee for a driver connection), so the map needs no lock.
type stmtCacheConn struct {
	sqliteConn
	stmts map[string]*cachedStmt
}

type cachedStmt struct {
	st driver.Stmt
	// busy while a Rows from it is open: a second use then gets a
	// statement of its own (resetting this one would end those rows).
	busy bool
}

// stmt returns the connection's statement for query, or nil when the
// query is not kept (a script of several statements, the cache full, or
// the statement in use).
func (c *stmtCacheConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if cs, ok := c.stmts[query]; ok {
		if cs.busy {
			return nil, nil
		}
		return cs, nil
	}
	if len(c.stmts) >= maxCachedStmts || strings.Contains(query, ";") {
		return nil, nil
	}
	st, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{st: st}
	c.stmts[query] = cs
	return cs, nil
}

func (c *stmtCacheConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return cs.st.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *stmtCacheConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := cs.st.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: rows, cs: cs}, nil
}

// Close closes the kept statements, then the connection.
func (c *stmtCacheConn) Close() error {
	var errs []error
	for q, cs := range c.stmts {
		errs = append(errs, cs.st.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.sqliteConn.Close())...)
}

// cachedRows frees its statement for the next use when closed.
type cachedRows struct {
	driver.Rows
	cs *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.cs.busy = false
	return err
}
