package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Purge deletes host's closed cleaning runs (with their steps) and ended
// claims older than record_retention; it is the only deletion the store
// makes. It touches only host's rows: hosts sharing a PostgreSQL store
// each keep records for their own retention. With retention 0 (the
// default) it deletes nothing. Unfinished runs and live claims are never
// purged, whatever their age, and neither is a record that was never
// exported (scourctl records export), unless purge_unexported says so.
//
// Signed records go only as an unbroken prefix of the host's chain, so
// that what is left still verifies without gaps (VerifyHost) and the next
// record never reuses a number: those numbered below the first record
// that may not go yet (too young, or not exported), and never the host's
// newest signed record. Unsigned records (closed before signing began)
// go whenever they are old enough (and exported).
func (s *Store) Purge(ctx context.Context, host string) (runs, claims int, err error) {
	if s.cfg.RecordRetention <= 0 {
		return 0, 0, nil
	}
	cutoff := formatTS(s.now().Add(-s.cfg.RecordRetention))
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		if runs, err = s.purgeRuns(ctx, tx, host, cutoff); err != nil {
			return err
		}
		claims, err = s.purgeClaims(ctx, tx, host, cutoff)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("claims: purge records of host %s older than %s: %w", host, s.cfg.RecordRetention, err)
	}
	return runs, claims, nil
}

func (s *Store) purgeRuns(ctx context.Context, tx *sql.Tx, host, cutoff string) (int, error) {
	due := `ended_at < ?`
	if !s.cfg.PurgeUnexported {
		due += ` AND id IN (SELECT run_id FROM record_exports)`
	}
	// The chain's first number that stays: the lowest that is not due,
	// else the newest (0 without signed records). A record closed
	// meanwhile is numbered above it and stays too.
	var keepFrom int64
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COALESCE(MIN(CASE WHEN NOT (`+due+`) THEN record_seq END), MAX(record_seq), 0)
		FROM cleaning_runs WHERE host = ? AND record_seq IS NOT NULL`), cutoff, host).Scan(&keepFrom); err != nil {
		return 0, err
	}
	if err := s.anchorPurge(ctx, tx, host, keepFrom); err != nil {
		return 0, err
	}
	old := `host = ? AND ended_at IS NOT NULL AND ` + due + ` AND (record_seq IS NULL OR record_seq < ?)`
	// Steps first: the foreign key's ON DELETE CASCADE would do it, but
	// only where foreign keys are enforced.
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM cleaning_steps WHERE run_id IN
		(SELECT id FROM cleaning_runs WHERE `+old+`)`), host, cutoff, keepFrom); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM cleaning_runs WHERE `+old), host, cutoff, keepFrom)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// anchorPurge records, in the purge's transaction, the newest signed
// record that goes (every one numbered below keepFrom goes): verify then
// requires the chain left to start right after it, so deleting the oldest
// records outside retention is still caught.
func (s *Store) anchorPurge(ctx context.Context, tx *sql.Tx, host string, keepFrom int64) error {
	var seq int64
	var hash string
	err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT record_seq, record_hash FROM cleaning_runs
		WHERE host = ? AND record_seq IS NOT NULL AND record_seq < ? ORDER BY record_seq DESC LIMIT 1`), host, keepFrom).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO record_purges (host, last_seq, last_hash, purged_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (host) DO UPDATE SET last_seq = excluded.last_seq, last_hash = excluded.last_hash, purged_at = excluded.purged_at`),
		host, seq, hash, s.stamp())
	return err
}

func (s *Store) purgeClaims(ctx context.Context, tx *sql.Tx, host, cutoff string) (int, error) {
	ended := `host = ? AND state IN ('released', 'orphaned') AND released_at < ?`
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM claim_devices WHERE claim_id IN
		(SELECT id FROM claims WHERE `+ended+`)`), host, cutoff); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM claims WHERE `+ended), host, cutoff)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// MarkExported records that the runs' final records left the store, so
// that retention may purge them. A run that is not closed is skipped: what
// was exported of it is not its final record (ExportRecord says which).
func (s *Store) MarkExported(ctx context.Context, runIDs ...string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		for _, id := range runIDs {
			if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO record_exports (run_id, exported_at)
				SELECT id, ? FROM cleaning_runs WHERE id = ? AND ended_at IS NOT NULL
				ON CONFLICT (run_id) DO NOTHING`), now, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claims: mark records exported: %w", err)
	}
	return nil
}
