package claims

import (
	"context"
	"database/sql"
	"fmt"
)

// A clean verdict is not a return. The run ends "cleaned" and stays open
// until the caller's un-reserve succeeded (MarkReturned) or cannot happen
// any more (CloseCleaned); a crash in between leaves the run open, and the
// next clean of the device resumes it (every step already done) and tries
// the un-reserve again: one release, one record.

// MarkReturned records that the cleaned run's device was un-reserved: the
// run becomes returned and its record is sealed. Repeating it is a no-op;
// a run that is not cleaned and open is ErrNotCleaned.
func (s *Store) MarkReturned(ctx context.Context, runID, note string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		run, err := s.lockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if run.State == RunReturned {
			return nil
		}
		if !run.AwaitingReturn() {
			return fmt.Errorf("%w: it is %s", ErrNotCleaned, run.State)
		}
		summary := run.Summary
		if note != "" {
			summary = note
		}
		return s.closeRun(ctx, tx, run, RunReturned, summary, s.stamp())
	})
	if err != nil {
		return fmt.Errorf("claims: mark cleaning run %s returned: %w", runID, err)
	}
	return nil
}

// NoteReturnPending records, on a cleaned run still waiting for its
// un-reserve, why the device is still reserved (e.g. Placement refused the
// write); the run stays open and a later clean of the device retries.
func (s *Store) NoteReturnPending(ctx context.Context, runID, why string) error {
	_, err := s.exec(ctx, `UPDATE cleaning_runs SET summary = ? WHERE id = ? AND state = 'cleaned' AND ended_at IS NULL`,
		boundOutput("cleaned; still reserved: "+why), runID)
	if err != nil {
		return fmt.Errorf("claims: note pending return of cleaning run %s: %w", runID, err)
	}
	return nil
}

// CloseCleaned seals a cleaned run that will not be returned by scour (the
// device got allocated or un-reserved by someone else, or a new run
// supersedes it), saying why. Closing a sealed run is a no-op.
func (s *Store) CloseCleaned(ctx context.Context, runID, why string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		run, err := s.lockRun(ctx, tx, runID)
		if err != nil || run.Closed() {
			return err
		}
		if !run.AwaitingReturn() {
			return fmt.Errorf("%w: it is %s", ErrNotCleaned, run.State)
		}
		return s.closeCleaned(ctx, tx, run, why)
	})
	if err != nil {
		return fmt.Errorf("claims: close cleaning run %s as cleaned: %w", runID, err)
	}
	return nil
}

func (s *Store) closeCleaned(ctx context.Context, tx *sql.Tx, run Run, why string) error {
	return s.closeRun(ctx, tx, run, RunCleaned, "cleaned; not returned to the pool by scour: "+why, s.stamp())
}

// usedSinceCleaned says who held the device after the open cleaned run's
// verdict ("" when nobody): then the device may hold another tenant's
// data, and the run must not be resumed into an un-reserve.
func (s *Store) usedSinceCleaned(ctx context.Context, q querier, run Run) (string, error) {
	if !run.AwaitingReturn() || run.CleanedAt == nil {
		return "", nil
	}
	t, ok, err := s.previousTenant(ctx, q, run.Host, run.DeviceRP)
	if err != nil || !ok || !t.Since.After(*run.CleanedAt) {
		return "", err
	}
	return fmt.Sprintf("Placement showed consumer %s holding the device at %s, after the clean; a new run cleans it again",
		t.Instance, t.Since.Format(tsLayout)), nil
}

// DeviceNow is what Placement shows of a device, for SettleReturns.
type DeviceNow struct {
	Reserved  bool // reserved = total
	Allocated bool
}

// SettleReturns closes the host's cleaned runs whose un-reserve happened
// or became moot while scourd was down (a crash after the un-reserve and
// before MarkReturned): a device Placement shows un-reserved and free is
// returned; one allocated is closed as cleaned, not returned by scour. A
// device still reserved is left to the next clean, which resumes the run.
// look reads the device; a failure leaves the run for the next settle.
func (s *Store) SettleReturns(ctx context.Context, host string, look func(ctx context.Context, rp string) (DeviceNow, error)) (int, error) {
	open, err := s.UnfinishedRuns(ctx, host)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range open {
		if !r.AwaitingReturn() {
			continue
		}
		d, err := look(ctx, r.DeviceRP)
		switch {
		case err != nil:
			s.log.WarnContext(ctx, "cleaned run waiting for its un-reserve: cannot read the device from Placement; retried later", "run", r.ID, "rp", r.DeviceRP, "err", err)
			continue
		case d.Reserved && !d.Allocated:
			continue // the next clean of the device resumes the run
		case d.Allocated:
			err = s.CloseCleaned(ctx, r.ID, "Placement showed the device allocated before scour un-reserved it")
		default:
			err = s.MarkReturned(ctx, r.ID, "cleaned and returned: Placement showed the device un-reserved and free, its un-reserve not yet recorded")
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
