package claims

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"
)

// openPostgres opens one pool for reads and writes; PostgreSQL's row locks
// (SELECT ... FOR UPDATE) serialize writers of the same rows.
func (s *Store) openPostgres(ctx context.Context) error {
	s.d = postgresDialect
	db, err := sql.Open("pgx", s.cfg.DSN)
	if err != nil {
		return fmt.Errorf("claims: postgres dsn %s: %w", RedactDSN(s.cfg.DSN), err)
	}
	db.SetMaxOpenConns(8)
	if s.lockHost != "" {
		db.SetMaxOpenConns(9) // one of them holds the host lock
	}
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return fmt.Errorf("claims: connect to postgres %s: %w (check dsn and that the server accepts this host)", RedactDSN(s.cfg.DSN), err)
	}
	s.w, s.r = db, db
	return nil
}
