package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// An operator's retirement decides its wipe (Retire's wipe) from what
// Placement and the store showed before the retirement fenced the
// device: a device free, un-fenced and not held by any tenant since its
// last clean needs none. But the store is written first and Placement
// after it, and Nova may allocate the device in between (a moment, or as
// long as Placement refuses the quarantine write: every scan retries it
// meanwhile). A tenant that held the device after that decision left its
// data on a retirement that waits for no wipe, and nothing would wipe it
// (review rev5 F4). So the scans look at every retirement that waits for
// nothing, and one whose device a tenant is known to have held since
// waits for its retirement wipe again.

// WipeRetirementIfUsed makes the device's open retirement (an operator's,
// not a cleaning verdict's) wait for its retirement wipe (WipePending)
// again when it waits for nothing and a tenant is known to have held the
// device since: since the retirement was recorded, or since its last
// retirement run began when it had one (that run wiped or recorded
// whatever was there), and since the device's last clean. Its reason
// says who. It returns that tenant; changed is false when the retirement
// stays as it was. A read decides first: the write transaction is taken
// only when it finds such a tenant.
func (s *Store) WipeRetirementIfUsed(ctx context.Context, host, rpUUID string) (t Tenant, changed bool, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("claims: whether device %s on host %s was used since its retirement: %w", rpUUID, host, err)
		}
	}()
	if _, used, err := s.usedSinceRetired(ctx, s.r, host, rpUUID, ""); err != nil || !used {
		return Tenant{}, false, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var used bool
		t, used, err = s.usedSinceRetired(ctx, tx, host, rpUUID, s.d.forUpdate)
		if err != nil || !used {
			changed = false
			return err
		}
		res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quarantines SET wipe = ?, reason = reason || ?
			WHERE host = ? AND device_rp = ? AND released_at IS NULL AND run_id = '' AND wipe = ''`),
			WipePending, boundOutput("; "+usedAfterDecided(t)), host, rpUUID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed = n == 1
		return err
	})
	if err != nil || !changed {
		return Tenant{}, false, err
	}
	return t, true, nil
}

// usedSinceRetired finds the device's open retirement waiting for no
// wipe and the tenant known to have held the device since (see
// WipeRetirementIfUsed); lock is appended to the retirement's SELECT.
func (s *Store) usedSinceRetired(ctx context.Context, q querier, host, rpUUID, lock string) (Tenant, bool, error) {
	var at string
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT quarantined_at FROM quarantines
		WHERE host = ? AND device_rp = ? AND released_at IS NULL AND run_id = '' AND wipe = ''`+lock), host, rpUUID).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, false, nil
	}
	if err != nil {
		return Tenant{}, false, err
	}
	after, err := parseTS(at)
	if err != nil {
		return Tenant{}, false, err
	}
	rps, err := s.aliases(ctx, q, host, rpUUID)
	if err != nil {
		return Tenant{}, false, err
	}
	// No cleaning runs while a device is retired: a run begun since is
	// its retirement run (under any provider at its address: a
	// retirement follows a re-created provider).
	for _, rp := range rps {
		var run sql.NullString
		if err := q.QueryRowContext(ctx, s.d.rebind(`SELECT MAX(started_at) FROM cleaning_runs
			WHERE host = ? AND device_rp = ? AND started_at >= ?`), host, rp, at).Scan(&run); err != nil {
			return Tenant{}, false, err
		}
		if run.Valid {
			t, err := parseTS(run.String)
			if err != nil {
				return Tenant{}, false, err
			}
			after = laterOf(after, t)
		}
	}
	cleaned, used, err := s.lastCleanOf(ctx, q, host, rps)
	if err != nil {
		return Tenant{}, false, err
	}
	return s.tenantSince(ctx, q, host, rps, laterOf(after, cleaned), used)
}

// usedAfterDecided is what a retirement's reason says when its wipe
// became pending because t held the device after the wipe was decided.
func usedAfterDecided(t Tenant) string {
	return fmt.Sprintf("consumer %s held the device after this retirement's wipe was decided (known since %s): retirement wipe pending, it is wiped before it leaves",
		t.Instance, t.Since.Format(tsLayout))
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
