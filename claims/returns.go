package claims

import (
	"context"
	"database/sql"
	"errors"
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
// device got retired or quarantined, or a new run supersedes it), saying
// why; its clean still counts as the device's last. Closing a sealed run
// is a no-op.
func (s *Store) CloseCleaned(ctx context.Context, runID, why string) error {
	return s.closeCleanedRun(ctx, runID, why, false)
}

// CloseCleanedUsed is CloseCleaned for a cleaned run whose device may
// have served a tenant after the run's clean that the store never
// recorded: its Placement generation moved since the run's all-clear
// (placement.ErrStaleReturn), a scan fenced it again while the run went
// on, or the un-reserve or the settle found it un-reserved by someone
// else (someone had lifted the fence, and Nova could schedule it), or
// Placement showed it allocated at the un-reserve or the settle (a
// consumer no scan may ever record, should it leave before the next one). The run's clean then no longer counts as the
// device's last (used_after_clean; PreviousTenant): the device is held
// by an unknown tenant (or one seen since the run began), so a scan that
// finds the device un-fenced before a later run cleaned it fences it
// again (docs/lifecycle.md), and a retirement wipes it.
func (s *Store) CloseCleanedUsed(ctx context.Context, runID, why string) error {
	return s.closeCleanedRun(ctx, runID, why, true)
}

func (s *Store) closeCleanedRun(ctx context.Context, runID, why string, used bool) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		run, err := s.lockRun(ctx, tx, runID)
		if err != nil || run.Closed() {
			return err
		}
		if !run.AwaitingReturn() {
			return fmt.Errorf("%w: it is %s", ErrNotCleaned, run.State)
		}
		return s.closeCleanedUsed(ctx, tx, run, why, used)
	})
	if err != nil {
		return fmt.Errorf("claims: close cleaning run %s as cleaned: %w", runID, err)
	}
	return nil
}

// closeCleanedUsed is closeCleaned, first marking the run used after its
// clean when used (CloseCleanedUsed).
func (s *Store) closeCleanedUsed(ctx context.Context, tx *sql.Tx, run Run, why string, used bool) error {
	if used {
		// Before the close: a sealed row cannot be updated.
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET used_after_clean = 1 WHERE id = ?`), run.ID); err != nil {
			return err
		}
	}
	return s.closeCleaned(ctx, tx, run, why)
}

// closeCleaned seals a cleaned run that scour will not return, saying
// why. While an un-reserve PUT of the run may have landed (its journal),
// "not returned by scour" may be false: the summary says the return is
// unknown instead.
func (s *Store) closeCleaned(ctx context.Context, tx *sql.Tx, run Run, why string) error {
	gen, pending, err := s.lastPut(ctx, tx, run.ID)
	if err != nil {
		return err
	}
	prefix := "cleaned; not returned to the pool by scour: "
	if pending {
		prefix = fmt.Sprintf("cleaned; not recorded as returned (scour's un-reserve, %s, may have returned it; its answer was never recorded): ", putAt(gen))
	}
	return s.closeRun(ctx, tx, run, RunCleaned, prefix+why, s.stamp())
}

// usedSinceStarted says who the store knows held the device after the
// open run started ("" when nobody): a consumer a scan or a burn saw
// holding it (SawHolder), or a claim of it, dated after the run's start.
// That consumer may have left its data on the device after the run's
// erase (the fence was lifted while scourd was down, by an operator,
// Cyborg or another cleaner), so neither a running run's done steps nor a
// cleaned run's verdict count any more: the run must not be resumed.
func (s *Store) usedSinceStarted(ctx context.Context, q querier, run Run) (string, error) {
	t, ok, err := s.previousTenant(ctx, q, run.Host, run.DeviceRP, run.StartedAt)
	if err != nil || !ok {
		return "", err
	}
	return fmt.Sprintf("Placement showed consumer %s holding the device at %s, after run %s started at %s; a new run cleans it again from the first step",
		t.Instance, t.Since.Format(tsLayout), run.ID, run.StartedAt.Format(tsLayout)), nil
}

// UsedSinceStarted says who the store knows held the device after run
// runID started ("" when nobody: usedSinceStarted), for the un-reserve of
// a run that was never interrupted: a tenant that held the device during
// the cleaning (its fence was lifted, it was scheduled there, and Nova's
// burn fenced it again) may have left data the run's erase never saw, so
// the run must not return the device. Four small reads, no Placement
// request.
func (s *Store) UsedSinceStarted(ctx context.Context, runID string) (string, error) {
	rs, err := s.queryRuns(ctx, s.r, `id = ?`, runID)
	if err == nil && len(rs) == 0 {
		err = ErrNoRun
	}
	var why string
	if err == nil {
		why, err = s.usedSinceStarted(ctx, s.r, rs[0])
	}
	if err != nil {
		return "", fmt.Errorf("claims: who held the device since cleaning run %s started: %w", runID, err)
	}
	return why, nil
}

// supersedeUsed closes an open run that must not be resumed because the
// device was used after it started (usedSinceStarted): a cleaned run as
// cleaned, not returned; a running one as failed (a later run retries,
// as for any superseded run), its summary saying why. A WARN names the
// device, the run and why.
func (s *Store) supersedeUsed(ctx context.Context, tx *sql.Tx, run Run, why string) error {
	s.log.WarnContext(ctx, "not resuming an interrupted cleaning run: the device was used after it started; a new run cleans it from the first step",
		"host", run.Host, "rp", run.DeviceRP, "address", run.Address, "run", run.ID, "state", run.State, "reason", why)
	if run.AwaitingReturn() {
		return s.closeCleaned(ctx, tx, run, why)
	}
	return s.closeRun(ctx, tx, run, RunFailed, "superseded: "+why, s.stamp())
}

// DeviceNow is what Placement shows of a device, for SettleReturns.
type DeviceNow struct {
	Reserved  bool // reserved = total
	Allocated bool
}

// Settled is what SettleReturns did.
type Settled struct {
	Returned  int // marked returned: a PUT of scour's may have landed
	Closed    int // closed as cleaned, not returned by scour, possibly used after the clean (CloseCleanedUsed)
	Elsewhere int // of Closed: un-reserved by someone else, scour sent no PUT
}

// SettleReturns closes the host's cleaned runs whose un-reserve happened
// or became moot while scourd was down (a crash after the un-reserve and
// before MarkReturned). A device Placement shows un-reserved and free is
// returned when the run's PUT journal holds a PUT that may have landed,
// and closed as un-reserved by someone else when it holds none (scour
// never sent one). One allocated is closed as cleaned, not returned by
// scour. Either way its clean no longer counts (CloseCleanedUsed): the
// consumer may leave before a scan records it, and a device someone else
// put in the pool may have served a tenant that came and went unseen, so
// the scan fences it again (PreviousTenant holds the tenant before, or an
// unknown one) and a new run cleans it. A device still reserved is left
// to the next clean, which resumes the run (and, if the journal shows
// Placement moved on since a PUT that may have landed, cleans it again:
// placement.ErrStaleReturn). look reads the device; a failure leaves the
// run for the next settle.
func (s *Store) SettleReturns(ctx context.Context, host string, look func(ctx context.Context, rp string) (DeviceNow, error)) (Settled, error) {
	var done Settled
	open, err := s.UnfinishedRuns(ctx, host)
	if err != nil {
		return done, err
	}
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
		}
		_, sent, err := s.PutJournal(r.ID).LastPut(ctx)
		if err != nil {
			return done, err
		}
		count, elsewhere := &done.Closed, false
		switch {
		case d.Allocated && sent:
			err = s.CloseCleanedUsed(ctx, r.ID, "Placement showed the device allocated")
		case d.Allocated:
			err = s.CloseCleanedUsed(ctx, r.ID, "Placement showed the device allocated before scour un-reserved it")
		case sent:
			err = s.MarkReturned(ctx, r.ID, "cleaned and returned: Placement showed the device un-reserved and free, its un-reserve not yet recorded")
			count = &done.Returned
		default:
			s.log.WarnContext(ctx, "device un-reserved by someone else: scour never sent its un-reserve; check for another cleaner, e.g. Nova's clean-on-delete sample; it may have served a tenant since, so a scan fences it again and a new run cleans it", "run", r.ID, "rp", r.DeviceRP)
			err = s.CloseCleanedUsed(ctx, r.ID, "every required step succeeded, but the device was un-reserved in Placement by someone else before scour sent its un-reserve (check for another cleaner, e.g. Nova's clean-on-delete sample), and may have served a tenant since, so a scan fences it again and a new run cleans it")
			elsewhere = true
		}
		if err != nil {
			return done, err
		}
		*count++
		if elsewhere {
			done.Elsewhere++
		}
	}
	return done, nil
}

// UnknownPutGeneration is the journal's generation for an un-reserve PUT
// that may have been sent at a generation nobody wrote down (a run still
// waiting for its return when schema v6 came); placement uses the same
// value.
const UnknownPutGeneration = -1

// PutJournal is the durable journal of one cleaned run's un-reserve PUTs
// (placement.PutJournal): the generation of the last PUT that may have
// landed, in cleaning_runs.unreserve_put_gen.
type PutJournal struct {
	s     *Store
	runID string
}

// PutJournal returns the un-reserve PUT journal of run runID.
func (s *Store) PutJournal(runID string) PutJournal { return PutJournal{s, runID} }

// LastPut returns the generation of the run's last un-reserve PUT that may
// have landed (pending false: none). A run cleaned by a scour without the
// journal (unreserve_journaled 0) may have sent one nobody wrote down:
// UnknownPutGeneration, pending.
func (j PutJournal) LastPut(ctx context.Context) (gen int, pending bool, err error) {
	return j.s.lastPut(ctx, j.s.r, j.runID)
}

func (s *Store) lastPut(ctx context.Context, q querier, runID string) (gen int, pending bool, err error) {
	var journaled int
	var g sql.NullInt64
	err = q.QueryRowContext(ctx, s.d.rebind(`SELECT unreserve_journaled, unreserve_put_gen FROM cleaning_runs WHERE id = ?`), runID).Scan(&journaled, &g)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNoRun
	}
	if err != nil {
		return 0, false, fmt.Errorf("claims: read the un-reserve PUT journal of cleaning run %s: %w", runID, err)
	}
	if journaled == 0 {
		return UnknownPutGeneration, true, nil
	}
	return int(g.Int64), g.Valid, nil
}

// NotePut stores gen before an un-reserve PUT at gen is sent. Only a
// cleaned run still waiting for its return sends one: for any other run
// it is ErrNotCleaned, and the PUT must not be sent. Nor is one sent
// while the device has an open quarantine (an operator's retirement, or
// a quarantine verdict): *QuarantineOpenError, the run left open for its
// caller to close. The check is the UPDATE's own, so it is atomic with
// Store.Retire: a retirement committed before it refuses the PUT, one
// after it finds the journaled PUT (its closeCleaned says the PUT may
// have returned the device) and its Placement write fences the device
// again (placement.Client.Quarantine waits for the PUT's outcome).
// Store.Retire closes only the runs already waiting for their return; a
// run still cleaning when the operator retired the device, whose
// retirement's Placement write failed, would otherwise reach its PUT at
// an unmoved generation and return a retired device to the pool.
func (j PutJournal) NotePut(ctx context.Context, gen int) error {
	n, err := j.s.exec(ctx, `UPDATE cleaning_runs SET unreserve_put_gen = ? WHERE id = ? AND state = 'cleaned' AND ended_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM quarantines q
			WHERE q.host = cleaning_runs.host AND q.device_rp = cleaning_runs.device_rp AND q.released_at IS NULL)`, gen, j.runID)
	if err == nil && n == 0 {
		err = j.s.whyNoPut(ctx, j.runID)
	}
	if err != nil {
		return fmt.Errorf("claims: journal the un-reserve PUT of cleaning run %s at generation %d: %w", j.runID, gen, err)
	}
	return nil
}

// ErrQuarantineOpen: the device has an open quarantine in the store (an
// operator's retirement or a quarantine verdict), so a cleaned run of it
// sends no un-reserve (*QuarantineOpenError).
var ErrQuarantineOpen = errors.New("the device is held quarantined (retired) in the claims store")

// QuarantineOpenError is NotePut's refusal while the device has an open
// quarantine: Quarantine is that quarantine, the run is still open.
type QuarantineOpenError struct{ Quarantine Quarantine }

func (e *QuarantineOpenError) Error() string {
	return fmt.Sprintf("%v since %s: %s", ErrQuarantineOpen, e.Quarantine.QuarantinedAt.Format(tsLayout), e.Quarantine.Reason)
}

func (e *QuarantineOpenError) Unwrap() error { return ErrQuarantineOpen }

// whyNoPut says why NotePut changed no row of run runID: the device's
// open quarantine while the run still waits for its return, else
// ErrNotCleaned. A quarantine released between the two (or a store that
// cannot be read) is neither: a plain error, the PUT retried later.
func (s *Store) whyNoPut(ctx context.Context, runID string) error {
	rs, err := s.queryRuns(ctx, s.r, `id = ?`, runID)
	if err != nil {
		return fmt.Errorf("no PUT journaled, and reading why failed: %w", err)
	}
	if len(rs) != 1 || !rs[0].AwaitingReturn() {
		return fmt.Errorf("%w: not a cleaned run waiting for its return", ErrNotCleaned)
	}
	q, ok, err := s.ActiveQuarantine(ctx, rs[0].Host, rs[0].DeviceRP)
	switch {
	case err != nil:
		return fmt.Errorf("no PUT journaled, and reading why failed: %w", err)
	case !ok:
		return errors.New("no PUT journaled: the device's quarantine was released meanwhile; retried later")
	}
	return &QuarantineOpenError{Quarantine: q}
}

// ClearGeneration returns the generation of the all-clear the run's
// first destructive attempt started on (Store.ClearGeneration): the only
// one its un-reserve PUT may be sent at.
func (j PutJournal) ClearGeneration(ctx context.Context) (gen int, ok bool, err error) {
	return j.s.ClearGeneration(ctx, j.runID)
}

// ClearPut records that no un-reserve PUT of the run can land any more.
func (j PutJournal) ClearPut(ctx context.Context) error {
	if _, err := j.s.exec(ctx, `UPDATE cleaning_runs SET unreserve_put_gen = NULL WHERE id = ? AND ended_at IS NULL`, j.runID); err != nil {
		return fmt.Errorf("claims: clear the un-reserve PUT journal of cleaning run %s: %w", j.runID, err)
	}
	return nil
}

// putAt names a journaled PUT for a record.
func putAt(gen int) string {
	if gen == UnknownPutGeneration {
		return "a PUT at an unrecorded generation"
	}
	return fmt.Sprintf("a PUT at generation %d", gen)
}
