package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Quarantine is a device kept out of the pool until an operator releases
// it. The store is the authority: the Placement trait only shows it.
type Quarantine struct {
	Host          string
	DeviceRP      string
	Address       string
	RunID         string // the run whose verdict quarantined the device
	Reason        string
	QuarantinedAt time.Time
	ReleasedAt    *time.Time
	ReleasedBy    string
	ReleaseReason string
	// Wipe is what an operator's retirement still waits for: WipePending
	// (the retirement wipe) or WipeDeclined (the record of scourctl
	// retire --no-wipe); "" for nothing.
	Wipe string
}

// Retirement wipes an operator's retirement waits for (Quarantine.Wipe).
const (
	// WipePending: the device was not cleaned since its last tenant, so
	// a retirement run wipes it, once nothing holds it, before it leaves.
	WipePending = "pending"
	// WipeDeclined: the operator retired it with --no-wipe; a retirement
	// run records it NOT WIPED (and counts it unwiped).
	WipeDeclined = "no-wipe"
)

// Retired reports an operator's retirement (Retire: a quarantine without
// a run), as opposed to a cleaning run's quarantine verdict.
func (q Quarantine) Retired() bool { return q.RunID == "" }

func (s *Store) openQuarantine(ctx context.Context, tx *sql.Tx, run Run, reason, now string) error {
	var n int
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM quarantines
		WHERE host = ? AND device_rp = ? AND released_at IS NULL`), run.Host, run.DeviceRP).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		// Already quarantined: the first verdict's row stands. A
		// retirement that waited for this run (its retirement wipe, or
		// its record of --no-wipe) has it now, and says how it ended.
		_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quarantines SET wipe = '', reason = reason || ?
			WHERE host = ? AND device_rp = ? AND released_at IS NULL AND wipe <> ''`),
			boundOutput("; retirement run "+run.ID+": "+reason), run.Host, run.DeviceRP)
		return err
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO quarantines
		(host, device_rp, address, run_id, reason, quarantined_at) VALUES (?, ?, ?, ?, ?, ?)`),
		run.Host, run.DeviceRP, run.Address, run.ID, reason, now)
	return err
}

// ActiveQuarantine returns the device's unreleased quarantine, if any.
func (s *Store) ActiveQuarantine(ctx context.Context, host, deviceRP string) (Quarantine, bool, error) {
	var q Quarantine
	var at string
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT host, device_rp, address, run_id, reason, quarantined_at, wipe
		FROM quarantines WHERE host = ? AND device_rp = ? AND released_at IS NULL`), host, deviceRP).
		Scan(&q.Host, &q.DeviceRP, &q.Address, &q.RunID, &q.Reason, &at, &q.Wipe)
	if errors.Is(err, sql.ErrNoRows) {
		return Quarantine{}, false, nil
	}
	if err != nil {
		return Quarantine{}, false, fmt.Errorf("claims: quarantine of device %s on host %s: %w", deviceRP, host, err)
	}
	if q.QuarantinedAt, err = parseTS(at); err != nil {
		return Quarantine{}, false, err
	}
	return q, true, nil
}

// ReleaseQuarantine records an operator's release of the device's
// quarantine (by: who, reason: why). It reports whether a quarantine was
// open; releasing a device that is not quarantined changes nothing.
func (s *Store) ReleaseQuarantine(ctx context.Context, host, deviceRP, by, reason string) (bool, error) {
	var released bool
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quarantines SET released_at = ?, released_by = ?, release_reason = ?
			WHERE host = ? AND device_rp = ? AND released_at IS NULL`), s.stamp(), by, boundOutput(reason), host, deviceRP)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		released = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claims: release quarantine of device %s on host %s: %w", deviceRP, host, err)
	}
	return released, nil
}

// OpenQuarantines returns the host's unreleased quarantines (verdicts and
// retirements): the devices that must stay reserved with the quarantine
// trait whatever Placement shows now. The reconciler holds Placement to
// it at every scan.
func (s *Store) OpenQuarantines(ctx context.Context, host string) ([]Quarantine, error) {
	// A quarantine that names no address takes the one the scans saw its
	// provider at, so that it can follow a re-created provider.
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT q.host, q.device_rp, COALESCE(NULLIF(q.address, ''), a.address, ''),
		q.run_id, q.reason, q.quarantined_at, q.wipe
		FROM quarantines q LEFT JOIN device_addresses a ON a.host = q.host AND a.device_rp = q.device_rp
		WHERE q.host = ? AND q.released_at IS NULL ORDER BY q.device_rp`), host)
	if err != nil {
		return nil, fmt.Errorf("claims: open quarantines on host %s: %w", host, err)
	}
	defer rows.Close()
	var out []Quarantine
	for rows.Next() {
		var q Quarantine
		var at string
		if err := rows.Scan(&q.Host, &q.DeviceRP, &q.Address, &q.RunID, &q.Reason, &at, &q.Wipe); err != nil {
			return nil, fmt.Errorf("claims: open quarantines on host %s: %w", host, err)
		}
		if q.QuarantinedAt, err = parseTS(at); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claims: open quarantines on host %s: %w", host, err)
	}
	return out, nil
}
