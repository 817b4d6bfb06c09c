package claims

import (
	"context"
	"database/sql"
	"fmt"
)

// Retire records an operator's decision to keep a device out of the pool
// (`scourctl retire`): an open quarantine without a run, whose reason
// says who retired it and why. Like a quarantine verdict's, it keeps the
// device reserved and uncleaned until an operator releases it
// (ReleaseQuarantine). It reports false when the device already has an
// open quarantine, which stands.
//
// A cleaned run of the device still waiting for its un-reserve is closed
// in the same transaction (cleaned, not returned): the release must clean
// the device again with its full pipeline, not resume that run into an
// un-reserve on a clean from before the retirement.
//
// wipe is what the retirement waits for (Quarantine.Wipe): WipePending
// for a device not cleaned since its last tenant, WipeDeclined for one
// the operator retires with --no-wipe, "" for a device with nothing to
// wipe; note, said after the reason, tells the operator which.
func (s *Store) Retire(ctx context.Context, host, deviceRP, address, by, reason, wipe, note string) (bool, error) {
	switch wipe {
	case "", WipePending, WipeDeclined:
	default:
		return false, fmt.Errorf("claims: retiring device %s on host %s: unknown retirement wipe %q", deviceRP, host, wipe)
	}
	created := false
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM quarantines
			WHERE host = ? AND device_rp = ? AND released_at IS NULL`), host, deviceRP).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		why := fmt.Sprintf("retired by %s: %s", by, reason)
		if note != "" {
			why += "; " + note
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO quarantines
			(host, device_rp, address, run_id, reason, quarantined_at, wipe) VALUES (?, ?, ?, '', ?, ?, ?)`),
			host, deviceRP, address, boundOutput(why), s.stamp(), wipe); err != nil {
			return err
		}
		created = true
		open, err := s.queryRuns(ctx, tx, `host = ? AND device_rp = ? AND ended_at IS NULL`+s.d.forUpdate, host, deviceRP)
		if err != nil {
			return err
		}
		for _, run := range open {
			if run.AwaitingReturn() {
				if err := s.closeCleaned(ctx, tx, run, why+"; it stays reserved, and its release cleans it again with a new run"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("claims: retiring device %s on host %s: %w", deviceRP, host, err)
	}
	return created, nil
}
