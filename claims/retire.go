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
func (s *Store) Retire(ctx context.Context, host, deviceRP, address, by, reason string) (bool, error) {
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
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO quarantines
			(host, device_rp, address, run_id, reason, quarantined_at) VALUES (?, ?, ?, '', ?, ?)`),
			host, deviceRP, address, fmt.Sprintf("retired by %s: %s", by, reason), s.stamp())
		created = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claims: retiring device %s on host %s: %w", deviceRP, host, err)
	}
	return created, nil
}
