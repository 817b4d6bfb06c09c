package claims

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// ReleaseInstance ends every live claim of the instance on the host
// (instance deleted, moved away, resize confirmed/reverted by the caller's
// choice of claims). It returns how many claims it released; releasing
// again returns 0.
func (s *Store) ReleaseInstance(ctx context.Context, host, instance, reason, messageID string) (int, error) {
	now := s.stamp()
	n, err := s.exec(ctx, `UPDATE claims SET state = 'released', released_at = ?, release_reason = ?, updated_at = ?, last_message_id = ?
		WHERE host = ? AND instance_uuid = ? AND state IN ('active', 'dormant')`,
		now, reason, now, messageID, host, instance)
	if err != nil {
		return 0, fmt.Errorf("claims: release claims of instance %s on host %s: %w", instance, host, err)
	}
	return n, nil
}

// ReleaseResizeClaim ends one side of a same-host resize: the target claim
// on revert, the source claim on confirm.
func (s *Store) ReleaseResizeClaim(ctx context.Context, host, instance string, resizeTarget bool, reason, messageID string) (int, error) {
	now := s.stamp()
	n, err := s.exec(ctx, `UPDATE claims SET state = 'released', released_at = ?, release_reason = ?, updated_at = ?, last_message_id = ?
		WHERE host = ? AND instance_uuid = ? AND resize_target = ? AND state IN ('active', 'dormant')`,
		now, reason, now, messageID, host, instance, boolInt(resizeTarget))
	if err != nil {
		return 0, fmt.Errorf("claims: release resize claim (target=%t) of instance %s on host %s: %w", resizeTarget, instance, host, err)
	}
	return n, nil
}

// MarkDormant marks the instance's active claims dormant (shelved
// offloaded): the orphan sweep leaves them alone.
func (s *Store) MarkDormant(ctx context.Context, host, instance, messageID string) (int, error) {
	now := s.stamp()
	n, err := s.exec(ctx, `UPDATE claims SET state = 'dormant', dormant_at = ?, updated_at = ?, last_message_id = ?
		WHERE host = ? AND instance_uuid = ? AND state = 'active'`, now, now, messageID, host, instance)
	if err != nil {
		return 0, fmt.Errorf("claims: mark claims of instance %s on host %s dormant: %w", instance, host, err)
	}
	return n, nil
}

// Reactivate makes the instance's dormant claims active again (unshelve).
// The orphan sweep measures claim_expiry_time from the reactivation.
func (s *Store) Reactivate(ctx context.Context, host, instance, messageID string) (int, error) {
	now := s.stamp()
	n, err := s.exec(ctx, `UPDATE claims SET state = 'active', reactivated_at = ?, updated_at = ?, last_message_id = ?
		WHERE host = ? AND instance_uuid = ? AND state = 'dormant'`, now, now, messageID, host, instance)
	if err != nil {
		return 0, fmt.Errorf("claims: reactivate claims of instance %s on host %s: %w", instance, host, err)
	}
	return n, nil
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// UpdateVolumes changes the volumes of the instance's live claims through
// fn, inside one transaction: concurrent updates never lose each other's
// changes. fn may run more than once (retries) and must only change its
// argument. It returns ErrNoClaim when the instance has no live claim on
// the host.
func (s *Store) UpdateVolumes(ctx context.Context, host, instance string, fn func(*Volumes) error) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		live, err := s.queryClaims(ctx, tx, `host = ? AND instance_uuid = ? AND state IN ('active', 'dormant') ORDER BY created_at, id`+s.d.forUpdate, host, instance)
		if err != nil {
			return err
		}
		if len(live) == 0 {
			return ErrNoClaim
		}
		v := live[0].Volumes
		v.Attached = append([]Volume(nil), v.Attached...)
		if err := fn(&v); err != nil {
			return err
		}
		if v.Attached == nil {
			v.Attached = []Volume{}
		}
		vols, _ := json.Marshal(v.Attached)
		_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE claims SET volumes = ?, root_volume_detached = ?, updated_at = ?
			WHERE host = ? AND instance_uuid = ? AND state IN ('active', 'dormant')`),
			string(vols), boolInt(v.RootDetached), s.stamp(), host, instance)
		return err
	})
	if err != nil {
		return fmt.Errorf("claims: update volumes of instance %s on host %s: %w", instance, host, err)
	}
	return nil
}

// SweepOrphans releases, as orphaned, the host's active claims older than
// claim_expiry_time (counted from creation or reactivation) whose instance
// has no allocation in Placement. Dormant claims are never orphans. It
// calls hasAllocation once per instance, outside any transaction, and
// skips a claim that changed meanwhile. It returns the claims it orphaned.
func (s *Store) SweepOrphans(ctx context.Context, host string, hasAllocation AllocationCheck) ([]Claim, error) {
	cutoff := formatTS(s.now().Add(-s.cfg.ClaimExpiry))
	old, err := s.queryClaims(ctx, s.r, `host = ? AND state = 'active' AND COALESCE(reactivated_at, created_at) < ? ORDER BY created_at, id`, host, cutoff)
	if err != nil {
		return nil, fmt.Errorf("claims: orphan sweep on host %s: %w", host, err)
	}
	verdict := map[string]bool{}
	var orphaned []Claim
	for _, c := range old {
		has, seen := verdict[c.InstanceUUID]
		if !seen {
			if has, err = hasAllocation(ctx, c.InstanceUUID); err != nil {
				return orphaned, fmt.Errorf("claims: orphan sweep on host %s: allocation of instance %s: %w", host, c.InstanceUUID, err)
			}
			verdict[c.InstanceUUID] = has
		}
		if has {
			continue
		}
		now := s.now()
		n, err := s.exec(ctx, `UPDATE claims SET state = 'orphaned', released_at = ?, release_reason = ?, updated_at = ?
			WHERE id = ? AND state = 'active' AND updated_at = ?`,
			formatTS(now), "orphan sweep: no allocation in Placement after claim_expiry_time "+s.cfg.ClaimExpiry.String(), formatTS(now), c.ID, formatTS(c.UpdatedAt))
		if err != nil {
			return orphaned, fmt.Errorf("claims: orphan sweep on host %s: release claim %s of instance %s: %w", host, c.ID, c.InstanceUUID, err)
		}
		if n == 1 {
			c.State, c.ReleasedAt = ClaimOrphaned, &now
			orphaned = append(orphaned, c)
			s.log.InfoContext(ctx, "orphan claim released", "host", host, "instance", c.InstanceUUID, "claim", c.ID)
		}
	}
	return orphaned, nil
}
