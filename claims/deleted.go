package claims

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// DeletedRetention is how long the store remembers that an instance's
// delete was handled. It only has to outlast the claim commands of the
// instance still in flight (a create.end of a large instance being
// handled when its delete came, or redelivered after a crash); past it a
// stray claim is the orphan sweep's (claim_expiry_time).
const DeletedRetention = 24 * time.Hour

// NoteDeleted records that host handled the delete of instance (its
// tombstone), and forgets those older than DeletedRetention in the same
// transaction, so the table holds about a day of the host's deletes.
// Idempotent: the first delete handled stands.
func (s *Store) NoteDeleted(ctx context.Context, host, instance, messageID string) error {
	cutoff := formatTS(s.now().Add(-DeletedRetention))
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM deleted_instances WHERE host = ? AND deleted_at < ?`), host, cutoff); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO deleted_instances (host, instance_uuid, message_id, deleted_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (host, instance_uuid) DO NOTHING`), host, instance, messageID, s.stamp())
		return err
	})
	if err != nil {
		return fmt.Errorf("claims: record that host %s handled the delete of instance %s: %w", host, instance, err)
	}
	return nil
}

// Deleted says whether host handled the delete of instance (within
// DeletedRetention).
func (s *Store) Deleted(ctx context.Context, host, instance string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM deleted_instances WHERE host = ? AND instance_uuid = ?`),
		host, instance).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("claims: whether host %s handled the delete of instance %s: %w", host, instance, err)
	}
	return n > 0, nil
}
