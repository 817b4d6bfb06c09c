package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Retire records an operator's decision to keep a device out of the pool
// (`scourctl retire`): an open quarantine without a run, whose reason
// says who retired it and why. Like a quarantine verdict's, it keeps the
// device reserved and uncleaned until an operator releases it
// (ReleaseQuarantine). It reports what it did (RetireOutcome) and the
// device's open quarantine as it stands after.
//
// A device that already has an open quarantine keeps it. A cleaning
// run's quarantine verdict (the device failed cleaning, so it most likely
// still holds its last tenant's data) takes the retirement when it waits
// for a wipe (WipePending, or WipeDeclined's NOT WIPED record): its reason
// says who retired it and why, and the reconciler runs its retirement run
// as for any retirement (RetireRecordedOnQuarantine). Anything else stands
// as it is (RetireStands): a retirement, or a verdict that already took one
// waiting for its run.
//
// A cleaned run of the device still waiting for its un-reserve is closed
// in the same transaction (cleaned, not returned): the release must clean
// the device again with its full pipeline, not resume that run into an
// un-reserve on a clean from before the retirement.
//
// wipe is what the retirement waits for (Quarantine.Wipe): WipePending
// for a device not cleaned since its last tenant, WipeDeclined for one
// the operator retires with --no-wipe, "" for a device with nothing to
// wipe; note, said after the reason, tells the operator which. The
// caller decided "" from reads made before this transaction: a tenant
// the store knows held the device since its last clean (recorded since
// those reads) makes it WipePending, and the returned quarantine says so
// (WipeRetirementIfUsed does the same for tenants recorded later).
func (s *Store) Retire(ctx context.Context, host, deviceRP, address, by, reason, wipe, note string) (RetireOutcome, Quarantine, error) {
	switch wipe {
	case "", WipePending, WipeDeclined:
	default:
		return 0, Quarantine{}, fmt.Errorf("claims: retiring device %s on host %s: unknown retirement wipe %q", deviceRP, host, wipe)
	}
	why := fmt.Sprintf("retired by %s: %s", by, reason)
	if note != "" {
		why += "; " + note
	}
	var outcome RetireOutcome
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		wipe, why := wipe, why // a retried transaction decides afresh
		if wipe == "" {
			t, used, err := s.previousTenantOfDevice(ctx, tx, host, deviceRP)
			if err != nil {
				return err
			}
			if used {
				wipe, why = WipePending, why+"; "+usedAfterDecided(t)
			}
		}
		var runID, had string
		err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT run_id, wipe FROM quarantines
			WHERE host = ? AND device_rp = ? AND released_at IS NULL`+s.d.forUpdate), host, deviceRP).Scan(&runID, &had)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case runID != "" && had == "" && wipe != "":
			// A quarantine verdict: the retirement waits for its wipe
			// (or NOT WIPED record) on that row; the verdict's run and
			// reason stay, the retirement's is said after them.
			res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quarantines SET wipe = ?, reason = reason || ?
				WHERE host = ? AND device_rp = ? AND released_at IS NULL AND run_id <> '' AND wipe = ''`),
				wipe, boundOutput("; "+why), host, deviceRP)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("recording the retirement on its open quarantine changed %d rows (%v); retry", n, err)
			}
			outcome = RetireRecordedOnQuarantine
			return nil
		default:
			outcome = RetireStands
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO quarantines
			(host, device_rp, address, run_id, reason, quarantined_at, wipe) VALUES (?, ?, ?, '', ?, ?, ?)`),
			host, deviceRP, address, boundOutput(why), s.stamp(), wipe); err != nil {
			return err
		}
		outcome = RetireCreated
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
		return 0, Quarantine{}, fmt.Errorf("claims: retiring device %s on host %s: %w", deviceRP, host, err)
	}
	q, ok, err := s.ActiveQuarantine(ctx, host, deviceRP)
	if err == nil && !ok {
		err = fmt.Errorf("claims: device %s on host %s: no open quarantine after its retirement (released meanwhile?); check with scourctl status", deviceRP, host)
	}
	return outcome, q, err
}

// RetireOutcome is what Store.Retire did.
type RetireOutcome int

const (
	// RetireCreated: the device had no open quarantine; the retirement
	// is one now.
	RetireCreated RetireOutcome = iota + 1
	// RetireRecordedOnQuarantine: the device's open quarantine verdict
	// took the retirement, which waits for its wipe (or NOT WIPED record).
	RetireRecordedOnQuarantine
	// RetireStands: the device's open quarantine stands unchanged (a
	// retirement already, or a verdict that took one or needs no wipe).
	RetireStands
)
