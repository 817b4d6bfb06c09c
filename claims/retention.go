package claims

import (
	"context"
	"database/sql"
	"fmt"
)

// Purge deletes host's closed cleaning runs (with their steps) and ended
// claims older than record_retention; it is the only deletion the store
// makes. It touches only host's rows: hosts sharing a PostgreSQL store
// each keep records for their own retention. With retention 0 (the
// default) it deletes nothing. Unfinished runs and live claims are never
// purged, whatever their age, and neither is a record that was never
// exported (scourctl records export), unless purge_unexported says so.
func (s *Store) Purge(ctx context.Context, host string) (runs, claims int, err error) {
	if s.cfg.RecordRetention <= 0 {
		return 0, 0, nil
	}
	cutoff := formatTS(s.now().Add(-s.cfg.RecordRetention))
	old := `host = ? AND ended_at IS NOT NULL AND ended_at < ?`
	if !s.cfg.PurgeUnexported {
		old += ` AND id IN (SELECT run_id FROM record_exports)`
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		// Steps first: the foreign key's ON DELETE CASCADE would do it, but
		// only where foreign keys are enforced.
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM cleaning_steps WHERE run_id IN
			(SELECT id FROM cleaning_runs WHERE `+old+`)`), host, cutoff); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM cleaning_runs WHERE `+old), host, cutoff)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		runs = int(n)
		ended := `host = ? AND state IN ('released', 'orphaned') AND released_at < ?`
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM claim_devices WHERE claim_id IN
			(SELECT id FROM claims WHERE `+ended+`)`), host, cutoff); err != nil {
			return err
		}
		res, err = tx.ExecContext(ctx, s.d.rebind(`DELETE FROM claims WHERE `+ended), host, cutoff)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		claims = int(n)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("claims: purge records of host %s older than %s: %w", host, s.cfg.RecordRetention, err)
	}
	return runs, claims, nil
}

// MarkExported records that the runs' records left the store, so that
// retention may purge them.
func (s *Store) MarkExported(ctx context.Context, runIDs ...string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		for _, id := range runIDs {
			if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO record_exports (run_id, exported_at) VALUES (?, ?)
				ON CONFLICT (run_id) DO NOTHING`), id, now); err != nil {
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
