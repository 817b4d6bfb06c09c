package claims

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/scour-project/scour/plugins"
)

const stepCols = `run_id, seq, name, step_index, attempt, optional, verification, started_at, ended_at, outcome, output,
	code, details, stderr, progress`

func (s *Store) steps(ctx context.Context, q querier, runID string) ([]Step, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind(`SELECT `+stepCols+` FROM cleaning_steps WHERE run_id = ? ORDER BY seq`), runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Step
	for rows.Next() {
		var st Step
		var started, details string
		var ended sql.NullString
		var verif, optional int
		if err := rows.Scan(&st.RunID, &st.Seq, &st.Name, &st.Index, &st.Attempt, &optional, &verif, &started, &ended, &st.Outcome, &st.Output,
			&st.Code, &details, &st.Stderr, &st.Progress); err != nil {
			return nil, err
		}
		st.Verification, st.Optional = verif != 0, optional != 0
		if details != "" {
			if err := json.Unmarshal([]byte(details), &st.Details); err != nil {
				return nil, fmt.Errorf("run %s step %d: details column: %w", runID, st.Seq, err)
			}
		}
		if st.StartedAt, err = parseTS(started); err == nil {
			st.EndedAt, err = parseNullTS(ended)
		}
		if err != nil {
			return nil, fmt.Errorf("run %s step %d: timestamp: %w", runID, st.Seq, err)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// Steps returns every step attempt of the run, in the order they started.
func (s *Store) Steps(ctx context.Context, runID string) ([]Step, error) {
	st, err := s.steps(ctx, s.r, runID)
	if err != nil {
		return nil, fmt.Errorf("claims: steps of cleaning run %s: %w", runID, err)
	}
	return st, nil
}

// LastCompletedStep returns the latest attempt that ended ok or skipped.
// The engine resumes at the pipeline step after it; a step that was
// running when the process died is not completed and is run again from
// its start.
func (s *Store) LastCompletedStep(ctx context.Context, runID string) (Step, bool, error) {
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return Step{}, false, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Done() {
			return steps[i], true, nil
		}
	}
	return Step{}, false, nil
}

// StepStarted records that an attempt of a step begins, and commits it
// before returning: the caller starts the step's work only afterwards. An
// attempt still open in the run (the process died during it) is closed as
// interrupted in the same transaction, so a run never has two open
// attempts.
func (s *Store) StepStarted(ctx context.Context, st StepStart) (Step, error) {
	var out Step
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := s.openRunForSteps(ctx, tx, st.RunID); err != nil {
			return err
		}
		var err error
		out, err = s.insertAttempt(ctx, tx, st)
		return err
	})
	if err != nil {
		return Step{}, fmt.Errorf("claims: start step %s of cleaning run %s: %w", st.Name, st.RunID, err)
	}
	return out, nil
}

// insertAttempt closes the run's open attempt, if any, as interrupted and
// opens a new attempt of st.
func (s *Store) insertAttempt(ctx context.Context, tx *sql.Tx, st StepStart) (Step, error) {
	now := s.stamp()
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_steps SET ended_at = ?, outcome = 'interrupted'
		WHERE run_id = ? AND ended_at IS NULL`), now, st.RunID); err != nil {
		return Step{}, err
	}
	var seq, attempt int
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COALESCE(MAX(seq), 0) + 1,
		COALESCE(SUM(CASE WHEN name = ? THEN 1 ELSE 0 END), 0) + 1 FROM cleaning_steps WHERE run_id = ?`),
		st.Name, st.RunID).Scan(&seq, &attempt); err != nil {
		return Step{}, err
	}
	out := Step{RunID: st.RunID, Seq: seq, Name: st.Name, Index: st.Index, Attempt: attempt, Optional: st.Optional, Verification: st.Verification}
	out.StartedAt, _ = parseTS(now)
	_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO cleaning_steps (`+stepCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, '', '', 0, '', '', 0)`),
		st.RunID, seq, st.Name, st.Index, attempt, boolInt(st.Optional), boolInt(st.Verification), now)
	return out, err
}

// StepProgress records an open attempt's progress in percent (0..100).
func (s *Store) StepProgress(ctx context.Context, runID string, seq, percent int) error {
	percent = min(max(percent, 0), 100)
	err := s.updateOpenStep(ctx, runID, `seq = ?`, seq, `progress = ?`, percent)
	if err != nil {
		return fmt.Errorf("claims: progress of step %d of cleaning run %s: %w", seq, runID, err)
	}
	return nil
}

// StepIndexProgress records the progress in percent (0..100) of the open
// attempt of the pipeline step at index, in one transaction. Without an
// open attempt of that step it records nothing and returns ErrNoStep.
func (s *Store) StepIndexProgress(ctx context.Context, runID string, index, percent int) error {
	percent = min(max(percent, 0), 100)
	err := s.updateOpenStep(ctx, runID, `step_index = ?`, index, `progress = ?`, percent)
	if err != nil {
		return fmt.Errorf("claims: progress of pipeline step %d of cleaning run %s: %w", index, runID, err)
	}
	return nil
}

// StepFinished closes an attempt with its outcome and bounded output,
// committed before the caller starts the next step.
func (s *Store) StepFinished(ctx context.Context, runID string, seq int, r StepResult) error {
	set, args, err := finishSet(r)
	if err == nil {
		err = s.updateOpenStep(ctx, runID, `seq = ?`, seq, set, append([]any{s.stamp()}, args...)...)
	}
	if err != nil {
		return fmt.Errorf("claims: finish step %d of cleaning run %s as %s: %w", seq, runID, r.Outcome, err)
	}
	return nil
}

// FinishStep records a step decided without being started (skipped,
// unsupported): an attempt of st, started and ended now, in one
// transaction committed before the caller starts the next step. An
// attempt still open in the run was started by a process that died
// during it (a step this process started is closed by StepFinished, by
// its seq): it is closed as interrupted first, never rewritten with this
// decision, so the record keeps that the step began.
func (s *Store) FinishStep(ctx context.Context, st StepStart, r StepResult) error {
	set, args, err := finishSet(r)
	if err == nil {
		err = s.writeTx(ctx, func(tx *sql.Tx) error {
			if err := s.openRunForSteps(ctx, tx, st.RunID); err != nil {
				return err
			}
			opened, err := s.insertAttempt(ctx, tx, st)
			if err != nil {
				return err
			}
			_, err = s.setOpenStep(ctx, tx, st.RunID, `seq = ?`, opened.Seq, set, append([]any{s.stamp()}, args...)...)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("claims: finish step %s of cleaning run %s as %s: %w", st.Name, st.RunID, r.Outcome, err)
	}
	return nil
}

// finishSet is the SET clause and its arguments (after the end time) that
// close an attempt with r.
func finishSet(r StepResult) (string, []any, error) {
	switch r.Outcome {
	case StepOK, StepFailed, StepSkipped:
	default:
		return "", nil, fmt.Errorf("outcome %q is not ok, failed or skipped", r.Outcome)
	}
	progress := "progress"
	if r.Outcome == StepOK {
		progress = "100"
	}
	// A step that reports what it verified is a verification, whatever
	// its type: the record lists it under "verification".
	verifies := ""
	if _, ok := r.Details[plugins.VerificationKey].(map[string]any); ok {
		verifies = ", verification = 1"
	}
	return `ended_at = ?, outcome = ?, output = ?, code = ?, details = ?, stderr = ?, progress = ` + progress + verifies,
		[]any{string(r.Outcome), boundOutput(r.Output), r.Code, boundDetails(r.Details), boundOutput(r.Stderr)}, nil
}

// keptDetails are the details keys decisions read (the purge check's
// technique and verification, resume's pipeline definition hash, the tool
// and the tries count; what a resumed run's later steps read from an
// earlier one: the erase, its expected read-back and how many blocks it
// sampled (verify), fpga-program's readback (fpga-readback); the
// retirement wipe and read-back marks (the record's retirement)):
// boundDetails drops every other key before them.
var keptDetails = map[string]bool{
	plugins.TechniqueKey: true, plugins.VerificationKey: true, "scour_pipeline_definition": true, "tool": true, triesKey: true,
	plugins.EraseKey: true, plugins.ExpectKey: true, plugins.SampledKey: true, plugins.SampleErrorKey: true, "readback": true,
	retireWipeKey: true, retireReadBackKey: true,
}

// boundDetails stores details as JSON, bounded: too long (over
// MaxOutputBytes), it first drops scour_tries' earlier_errors, then the
// other keys, largest first, naming them under "truncated_keys", so the
// keys in keptDetails survive; only when those alone are too long is the
// whole replaced by a truncated rendering (MaxOutputBytes of text, which
// JSON escaping can make somewhat longer).
func boundDetails(d map[string]any) string {
	if len(d) == 0 {
		return ""
	}
	b, err := json.Marshal(d)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"unencodable": err.Error()})
	}
	if len(b) <= MaxOutputBytes {
		return string(b)
	}
	var m map[string]any
	if json.Unmarshal(b, &m) == nil {
		if tries, ok := m["scour_tries"].(map[string]any); ok {
			if _, ok := tries["earlier_errors"]; ok {
				delete(tries, "earlier_errors")
				tries["earlier_errors_dropped"] = true
				if b, _ = json.Marshal(m); len(b) <= MaxOutputBytes {
					return string(b)
				}
			}
		}
		var others []string
		size := map[string]int{}
		for k, v := range m {
			if !keptDetails[k] {
				vb, _ := json.Marshal(v)
				others, size[k] = append(others, k), len(vb)
			}
		}
		slices.SortFunc(others, func(a, b string) int { return cmp.Or(size[b]-size[a], strings.Compare(a, b)) })
		var dropped []string
		for _, k := range others {
			delete(m, k)
			dropped = append(dropped, k)
			m["truncated_keys"] = dropped
			if b, _ = json.Marshal(m); len(b) <= MaxOutputBytes {
				return string(b)
			}
		}
	}
	b, _ = json.Marshal(map[string]any{"truncated": boundOutput(string(b))})
	return string(b)
}

// updateOpenStep sets set on the run's open attempt that matches which
// (`seq = ?` or `step_index = ?`), in its own transaction; ErrNoStep when
// there is none.
func (s *Store) updateOpenStep(ctx context.Context, runID, which string, key int, set string, args ...any) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := s.openRunForSteps(ctx, tx, runID); err != nil {
			return err
		}
		n, err := s.setOpenStep(ctx, tx, runID, which, key, set, args...)
		if err == nil && n != 1 {
			err = fmt.Errorf("%w: no open attempt with %s (already finished, or superseded by a newer attempt)", ErrNoStep, strings.Replace(which, "?", strconv.Itoa(key), 1))
		}
		return err
	})
}

func (s *Store) setOpenStep(ctx context.Context, tx *sql.Tx, runID, which string, key int, set string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_steps SET `+set+` WHERE run_id = ? AND `+which+` AND ended_at IS NULL`),
		append(args, runID, key)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// openRunForSteps refuses step writes to a finished (sealed) run. It reads
// only the run's state (locking the row on PostgreSQL): it runs in every
// step transaction.
func (s *Store) openRunForSteps(ctx context.Context, tx *sql.Tx, runID string) error {
	var state RunState
	err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT state FROM cleaning_runs WHERE id = ?`+s.d.forUpdate), runID).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNoRun
	}
	if err != nil {
		return err
	}
	if (Run{State: state}).Finished() {
		return fmt.Errorf("%w as %s: its record is sealed", ErrRunFinished, state)
	}
	return nil
}
