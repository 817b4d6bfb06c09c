package claims

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// A device's provider can be re-created with a new UUID at the same PCI
// address (a rebuilt Placement database, a compute node re-registered).
// What the store knows of the device (who held it since its last clean,
// its open quarantine) must follow the device, or it would return to the
// pool uncleaned. So the store remembers each provider's address as the
// scans of this host's tree read it (SawAddress), and a device's history
// is that of every provider seen at its address on the host (aliases).
// A different card at the same address (swapped while the host was down)
// inherits the old one's history: it is fenced and cleaned once more,
// the fail-safe side.

// SawAddress records that this host's Placement tree shows the device
// provider rpUUID at PCI address addr (from the provider's name: rule 3,
// never from a notification). Only a change is written.
func (s *Store) SawAddress(ctx context.Context, host, rpUUID, addr string) error {
	if addr == "" {
		return nil
	}
	_, err := s.exec(ctx, `INSERT INTO device_addresses (host, device_rp, address, seen_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (host, device_rp) DO UPDATE SET address = excluded.address, seen_at = excluded.seen_at
		WHERE device_addresses.address <> excluded.address`, host, rpUUID, addr, s.stamp())
	if err != nil {
		return fmt.Errorf("claims: record the address %s of device %s on host %s: %w", addr, rpUUID, host, err)
	}
	return nil
}

// aliases returns rpUUID and then every other provider seen at its
// address on host, in a stable order.
func (s *Store) aliases(ctx context.Context, q querier, host, rpUUID string) ([]string, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind(`SELECT device_rp FROM device_addresses
		WHERE host = ? AND device_rp <> ? AND address = (SELECT address FROM device_addresses WHERE host = ? AND device_rp = ?)
		ORDER BY device_rp`), host, rpUUID, host, rpUUID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{rpUUID}
	for rows.Next() {
		var rp string
		if err := rows.Scan(&rp); err != nil {
			return nil, err
		}
		out = append(out, rp)
	}
	return out, rows.Err()
}

// lastCleanOf is the newest lastClean of any of rps (zero: none), and
// the newest start of a run of theirs closed by CloseCleanedUsed, with
// its provider.
func (s *Store) lastCleanOf(ctx context.Context, q querier, host string, rps []string) (last time.Time, used usedRun, err error) {
	for _, rp := range rps {
		t, u, err := s.lastClean(ctx, q, host, rp)
		if err != nil {
			return time.Time{}, usedRun{}, err
		}
		if t.After(last) {
			last = t
		}
		if u.After(used.At) {
			used = usedRun{At: u, RP: rp}
		}
	}
	return last, used, nil
}

// usedRun is the newest run closed by CloseCleanedUsed: when it started,
// on which provider.
type usedRun struct {
	At time.Time
	RP string
}

// ReattachQuarantine moves the open quarantine of provider from, which
// is no longer in this host's tree, to provider to, which the tree shows
// at the same address addr: the device's provider was re-created. The
// reason says so. When to has an open quarantine of its own, from's is
// closed instead (the device stays quarantined by to's). It reports
// whether from had an open quarantine.
func (s *Store) ReattachQuarantine(ctx context.Context, host, from, to, addr string) (bool, error) {
	var moved bool
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM quarantines
			WHERE host = ? AND device_rp = ? AND released_at IS NULL`), host, to).Scan(&n); err != nil {
			return err
		}
		note := "; provider re-created: was " + from + ", now " + to
		// Only at from's address: its own, or where the scans saw from.
		const at = ` AND COALESCE(NULLIF(address, ''), (SELECT a.address FROM device_addresses a
			WHERE a.host = quarantines.host AND a.device_rp = quarantines.device_rp), '') = ?`
		q := `UPDATE quarantines SET device_rp = ?, address = ?, reason = reason || ?
			WHERE host = ? AND device_rp = ? AND released_at IS NULL` + at
		args := []any{to, addr, boundOutput(note), host, from, addr}
		if n > 0 {
			q = `UPDATE quarantines SET released_at = ?, released_by = 'scourd', release_reason = ?
				WHERE host = ? AND device_rp = ? AND released_at IS NULL` + at
			args = []any{s.stamp(), boundOutput(note[2:] + ", which has its own open quarantine"), host, from, addr}
		}
		res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
		if err != nil {
			return err
		}
		rows, err := res.RowsAffected()
		moved = rows > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claims: move the quarantine of device %s on host %s to its re-created provider %s: %w", from, host, to, err)
	}
	return moved, nil
}
