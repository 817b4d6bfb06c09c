package claims

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/plugins"
)

const runCols = `id, host, device_rp, address, serial, model, prev_instance, prev_project, profile, pipeline, pipeline_version,
	planned_steps, triggered_by, state, summary, started_at, ended_at, cleaned_at, media, category, scour_version`

// mediaColumn is the media column: the record's Media plus where the
// run's serial came from, which the engine needs to compare serials like
// with like and the record does not name.
type mediaColumn struct {
	Media
	SerialSource string `json:"serial_source,omitempty"`
}

func scanRun(sc scanner) (Run, error) {
	var r Run
	var started, planned, media string
	var ended, cleaned sql.NullString
	err := sc.Scan(&r.ID, &r.Host, &r.DeviceRP, &r.Address, &r.Serial, &r.Model, &r.PrevInstance, &r.PrevProject,
		&r.Profile, &r.Pipeline, &r.PipelineVersion, &planned, &r.Trigger, &r.State, &r.Summary, &started, &ended, &cleaned,
		&media, &r.Category, &r.ScourVersion)
	if err != nil {
		return r, err
	}
	var mc mediaColumn
	if err := json.Unmarshal([]byte(media), &mc); err != nil {
		return r, fmt.Errorf("run %s: media column: %w", r.ID, err)
	}
	r.Media, r.SerialSource = mc.Media, mc.SerialSource
	if err := json.Unmarshal([]byte(planned), &r.PlannedSteps); err != nil {
		return r, fmt.Errorf("run %s: planned_steps column: %w", r.ID, err)
	}
	if r.StartedAt, err = parseTS(started); err == nil {
		r.EndedAt, err = parseNullTS(ended)
	}
	if err == nil {
		r.CleanedAt, err = parseNullTS(cleaned)
	}
	if err != nil {
		return r, fmt.Errorf("run %s: timestamp: %w", r.ID, err)
	}
	return r, nil
}

func (s *Store) queryRuns(ctx context.Context, q querier, where string, args ...any) ([]Run, error) {
	return queryAll(ctx, q, s.d.rebind(`SELECT `+runCols+` FROM cleaning_runs WHERE `+where), scanRun, args...)
}

// OpenRun returns the device's unfinished run when there is one (resumed
// true: the engine continues it at its first unfinished step) and creates
// a new run otherwise. There is never more than one unfinished run per
// device, on either backend (a partial unique index enforces it). An
// unfinished run the store saw another holder of the device after
// (usedSinceStarted) is not resumed: it is closed, saying why, and a new
// run starts from the first step.
func (s *Store) OpenRun(ctx context.Context, rs RunStart) (run Run, resumed bool, err error) {
	var errs []error
	if rs.Host == "" {
		errs = append(errs, errors.New("host is empty"))
	}
	if rs.DeviceRP == "" {
		errs = append(errs, errors.New("device resource provider uuid is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return Run{}, false, fmt.Errorf("claims: open cleaning run for device %s (%s): %w", rs.DeviceRP, rs.Address, err)
	}
	if rs.PrevInstance == "" {
		rs.PrevInstance = UnknownTenant
	}
	if rs.PrevProject == "" {
		rs.PrevProject = UnknownTenant
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		open, err := s.queryRuns(ctx, tx, `host = ? AND device_rp = ? AND ended_at IS NULL`+s.d.forUpdate, rs.Host, rs.DeviceRP)
		if err != nil {
			return err
		}
		if len(open) > 0 {
			stale, err := s.usedSinceStarted(ctx, tx, open[0])
			if err != nil {
				return err
			}
			if stale == "" {
				run, resumed = open[0], true
				run.Attempt, err = s.attempt(ctx, tx, run)
				return err
			}
			if err := s.supersedeUsed(ctx, tx, open[0], stale); err != nil {
				return err
			}
		}
		run = Run{ID: newID(), RunStart: rs, State: RunRunning, StartedAt: s.now().UTC().Truncate(time.Microsecond)}
		if run.PlannedSteps == nil {
			run.PlannedSteps = []string{}
		}
		resumed = false
		planned, _ := json.Marshal(run.PlannedSteps)
		media, _ := json.Marshal(mediaColumn{rs.Media, rs.SerialSource})
		_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO cleaning_runs (`+runCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', '', ?, NULL, NULL, ?, ?, ?)`),
			run.ID, rs.Host, rs.DeviceRP, rs.Address, rs.Serial, rs.Model, rs.PrevInstance, rs.PrevProject,
			rs.Profile, rs.Pipeline, rs.PipelineVersion, string(planned), rs.Trigger, formatTS(run.StartedAt),
			string(media), rs.Category, rs.ScourVersion)
		if err != nil {
			return err
		}
		run.Attempt, err = s.attempt(ctx, tx, run)
		return err
	})
	if err != nil {
		return Run{}, false, fmt.Errorf("claims: open cleaning run for device %s (%s) on host %s: %w", rs.DeviceRP, rs.Address, rs.Host, err)
	}
	return run, resumed, nil
}

// GetRun returns one run.
func (s *Store) GetRun(ctx context.Context, runID string) (Run, error) {
	rs, err := s.queryRuns(ctx, s.r, `id = ?`, runID)
	if err != nil {
		return Run{}, fmt.Errorf("claims: cleaning run %s: %w", runID, err)
	}
	if len(rs) == 0 {
		return Run{}, fmt.Errorf("claims: cleaning run %s: %w", runID, ErrNoRun)
	}
	if rs[0].Attempt, err = s.attempt(ctx, s.r, rs[0]); err != nil {
		return Run{}, fmt.Errorf("claims: cleaning run %s: %w", runID, err)
	}
	return rs[0], nil
}

// attempt counts the device's runs since its last cleaned (returned or
// not) or quarantined run, up to and including r. Aborted runs (the device got allocated, or
// Placement no longer showed it dirty) never tested the device and do not
// use up its budget. A quarantined device returns to cleaning
// only through an operator's unquarantine, which deserves a full budget.
func (s *Store) attempt(ctx context.Context, q querier, r Run) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM cleaning_runs
		WHERE host = ? AND device_rp = ? AND (state <> 'aborted' OR id = ?) AND (started_at < ? OR (started_at = ? AND id <= ?))
		AND started_at > COALESCE((SELECT MAX(COALESCE(cleaned_at, ended_at)) FROM cleaning_runs
			WHERE host = ? AND device_rp = ? AND state IN ('cleaned', 'returned', 'quarantined') AND COALESCE(cleaned_at, ended_at) <= ?), '')`),
		r.Host, r.DeviceRP, r.ID, formatTS(r.StartedAt), formatTS(r.StartedAt), r.ID, r.Host, r.DeviceRP, formatTS(r.StartedAt)).Scan(&n)
	return n, err
}

// UnfinishedRuns returns the host's open runs (running, or cleaned and
// waiting for the un-reserve).
func (s *Store) UnfinishedRuns(ctx context.Context, host string) ([]Run, error) {
	rs, err := s.queryRuns(ctx, s.r, `host = ? AND ended_at IS NULL ORDER BY started_at, id`, host)
	if err != nil {
		return nil, fmt.Errorf("claims: unfinished cleaning runs on host %s: %w", host, err)
	}
	return rs, nil
}

// RunFilter selects runs for ListRuns; empty fields match everything.
type RunFilter struct {
	Host string
	// Device matches the resource provider uuid or the PCI address.
	Device string
	State  RunState
	Limit  int
}

// ListRuns returns matching runs, newest first.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	conds, args := []string{"1 = 1"}, []any{}
	if f.Host != "" {
		conds, args = append(conds, "host = ?"), append(args, f.Host)
	}
	if f.Device != "" {
		conds, args = append(conds, "(device_rp = ? OR address = ?)"), append(args, f.Device, f.Device)
	}
	if f.State != "" {
		conds, args = append(conds, "state = ?"), append(args, string(f.State))
	}
	q := strings.Join(conds, " AND ") + " ORDER BY started_at DESC, id"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rs, err := s.queryRuns(ctx, s.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claims: list cleaning runs: %w", err)
	}
	return rs, nil
}

// FinishRun gives the run its verdict. RunCleaned seals the steps but
// keeps the run open until MarkReturned (the un-reserve succeeded) or
// CloseCleaned (it will not happen); it is refused (ErrNotClean) unless
// every step's last attempt ended ok or skipped and no step is still
// running. Every other verdict seals the run at once: afterwards neither
// the run nor its steps change. RunReturned is not a verdict: only
// MarkReturned reaches it. Finishing again with the same state is a
// no-op, so a caller that crashed after FinishRun can repeat it; a
// different state is ErrRunFinished, except on a cleaned run still
// waiting for its un-reserve (a resumed run superseded by a config
// change): that run is closed as cleaned, not returned, with the summary.
func (s *Store) FinishRun(ctx context.Context, runID string, state RunState, summary string) error {
	switch state {
	case RunCleaned, RunQuarantined, RunAborted, RunFailed:
	default:
		return fmt.Errorf("claims: finish cleaning run %s: state %q is not a verdict (cleaned, quarantined, aborted, failed; returned comes only from MarkReturned after the un-reserve)", runID, state)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		run, err := s.lockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if run.Finished() {
			switch {
			case run.State == state:
				return nil
			case run.AwaitingReturn():
				return s.closeCleaned(ctx, tx, run, summary)
			}
			return fmt.Errorf("%w as %s", ErrRunFinished, run.State)
		}
		now := s.stamp()
		if state == RunCleaned {
			if err := s.checkClean(ctx, tx, run); err != nil {
				return err
			}
			// unreserve_journaled: this scour journals its un-reserve PUTs
			// (PutJournal), so a NULL generation means none was sent.
			_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET state = 'cleaned', summary = ?, cleaned_at = ?, unreserve_journaled = 1 WHERE id = ?`),
				boundOutput(summary), now, runID)
			return err
		}
		if err := s.closeRun(ctx, tx, run, state, summary, now); err != nil {
			return err
		}
		if state == RunQuarantined {
			// In the same transaction as the verdict: no crash window in
			// which the record says quarantined and the store does not.
			return s.openQuarantine(ctx, tx, run, boundOutput(summary), now)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claims: finish cleaning run %s as %s: %w", runID, state, err)
	}
	return nil
}

// lockRun reads the run inside tx, locking its row on PostgreSQL so that
// step writes and FinishRun of one run serialize.
func (s *Store) lockRun(ctx context.Context, tx *sql.Tx, runID string) (Run, error) {
	rs, err := s.queryRuns(ctx, tx, `id = ?`+s.d.forUpdate, runID)
	if err != nil {
		return Run{}, err
	}
	if len(rs) == 0 {
		return Run{}, ErrNoRun
	}
	return rs[0], nil
}

func (s *Store) checkClean(ctx context.Context, tx *sql.Tx, run Run) error {
	steps, err := s.steps(ctx, tx, run.ID)
	if err != nil {
		return err
	}
	if len(steps) == 0 {
		return fmt.Errorf("%w: no step ran", ErrNotClean)
	}
	last := map[string]Step{}
	for _, st := range steps {
		last[st.Name] = st
	}
	var bad []string
	for _, st := range steps {
		l := last[st.Name]
		if l.Seq != st.Seq || l.Done() || (l.Optional && l.EndedAt != nil) {
			continue
		}
		outcome := string(l.Outcome)
		if outcome == "" {
			outcome = "still running"
		}
		bad = append(bad, fmt.Sprintf("%s attempt %d: %s", l.Name, l.Attempt, outcome))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrNotClean, strings.Join(bad, "; "))
	}
	if bad := unverified(last); len(bad) > 0 {
		return fmt.Errorf("%w: %s: the media may still hold the previous tenant's data", ErrNotClean, strings.Join(bad, "; "))
	}
	switch run.Category {
	case CategoryClear:
		if !erasedBefore(last, math.MaxInt) {
			return fmt.Errorf("%w: pipeline %s claims clear, but no erasing step that reports the technique it applied (details.technique) succeeded in this run: %s", ErrNotClean, run.Pipeline,
				whyUnerased(last, math.MaxInt, "a clear record would claim an erase that did not happen"))
		}
		return nil
	case CategoryPurge:
	default:
		return nil
	}
	verified := verifiedIn(last)
	if verified == 0 {
		return fmt.Errorf("%w: pipeline %s claims purge, but no verification step passed in this run", ErrNotClean, run.Pipeline)
	}
	if !erasedBefore(last, verified) {
		return fmt.Errorf("%w: pipeline %s claims purge, but no erasing step that reports the technique it applied (details.technique) succeeded in this run before its passed verification: %s", ErrNotClean, run.Pipeline,
			whyUnerased(last, verified, "a read-back alone proves no erase"))
	}
	return nil
}

// CategoryPurge is the category whose runs need an erase and, after it, a
// passing verification.
const CategoryPurge = "purge"

// CategoryClear is the category whose runs need an erase that succeeded
// (a step reporting its technique): a clear record says the media were
// erased.
const CategoryClear = "clear"

// unverified lists the steps whose last attempt ran (not skipped) and
// recorded a verification that is neither passed nor not-applicable (a
// passed one counts as failed when the attempt failed): whatever the
// category, and whether the step is optional or not, no such run is
// clean. The engine refuses them first; this is the store's
// own word on the record.
func unverified(last map[string]Step) []string {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(last)) {
		st := last[name]
		if !st.Verification || st.Outcome == StepSkipped {
			continue
		}
		if r := verificationOf(st, string(st.Outcome)).Result; r != "passed" && r != "not-applicable" {
			bad = append(bad, fmt.Sprintf("step %s attempt %d (%s) recorded verification %q", st.Name, st.Attempt, st.Outcome, r))
		}
	}
	return bad
}

// verifiedIn returns the Seq of the latest verifying step whose last
// attempt ended ok and reported a passed verification, or 0 for none.
func verifiedIn(last map[string]Step) int {
	seq := 0
	for _, st := range last {
		if st.Verification && st.Outcome == StepOK && verificationOf(st, string(StepOK)).Result == "passed" {
			seq = max(seq, st.Seq)
		}
	}
	return seq
}

// whyUnerased says what happened instead of an erase before seq in a
// clear or purge run that has none (erasedBefore false). The store does
// not know which step is the erase, so it names the steps, verifications
// aside, that succeeded without reporting a technique (an erasing plugin
// that reports none: its erase cannot count, and resuming or retrying
// the run cannot change that) and those skipped or failed; without the
// former, every erase was skipped or failed, and unclaimed says what a
// clean record would then claim.
func whyUnerased(last map[string]Step, seq int, unclaimed string) string {
	var untold, undone []string
	for _, st := range slices.SortedFunc(maps.Values(last), func(a, b Step) int { return a.Seq - b.Seq }) {
		if st.Seq >= seq || st.Verification {
			continue
		}
		switch st.Outcome {
		case StepOK:
			untold = append(untold, st.Name)
		case StepSkipped, StepFailed:
			undone = append(undone, fmt.Sprintf("%s (%s)", st.Name, st.Outcome))
		}
	}
	switch {
	case len(untold) == 0 && len(undone) == 0:
		return "no step but a verification ran, and " + unclaimed
	case len(untold) == 0:
		return fmt.Sprintf("every erase was skipped or failed (%s), and %s", strings.Join(undone, ", "), unclaimed)
	}
	why := fmt.Sprintf("steps that succeeded without reporting a technique: %s. If one of them is the pipeline's erase (a plugin), "+
		"the plugin must report details.technique, the technique it applied in words (\"overwrite, 1 pass of 0x00\", "+
		"\"NVMe Sanitize, Crypto Erase\", as nvme-erase, nvme-sanitize, nvme-format and overwrite do), or its erase cannot count; "+
		"update it (scourctl plugin test warns when CLEAN reports none), then release the device with scourctl placement unquarantine",
		strings.Join(untold, ", "))
	if len(undone) > 0 {
		why += fmt.Sprintf("; skipped or failed: %s", strings.Join(undone, ", "))
	}
	return why
}

// erasedBefore reports whether the last attempt of some step that says
// which sanitization technique it applied (details.technique, as every
// erasing built-in does and the record lists) ended ok before seq. A
// verification with nothing erased before it checks media as the tenant
// left them: in sample mode, blocks that happened to read as zeros.
func erasedBefore(last map[string]Step, seq int) bool {
	for _, st := range last {
		if t, _ := st.Details[plugins.TechniqueKey].(string); t != "" && st.Outcome == StepOK && st.Seq < seq {
			return true
		}
	}
	return false
}

// SetRunIdentity completes the device serial, model and firmware of an
// unfinished run: an NVMe on vfio-pci shows none of them (or, for the
// firmware, what was seen before the tenant, who may have updated it)
// until a step binds it to nvme, after the run was opened. An empty
// firmware leaves the recorded one. A finished (sealed) run is refused.
func (s *Store) SetRunIdentity(ctx context.Context, runID, serial, model, firmware string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := s.openRunForSteps(ctx, tx, runID); err != nil {
			return err
		}
		var raw string
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT media FROM cleaning_runs WHERE id = ?`), runID).Scan(&raw); err != nil {
			return err
		}
		var media mediaColumn
		if err := json.Unmarshal([]byte(raw), &media); err != nil {
			return fmt.Errorf("media column: %w", err)
		}
		if firmware != "" {
			media.Firmware = firmware
		}
		media.SerialSource = "" // the step's driver's
		b, err := json.Marshal(media)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET serial = ?, model = ?, media = ? WHERE id = ?`), serial, model, string(b), runID)
		return err
	})
	if err != nil {
		return fmt.Errorf("claims: set serial, model and firmware of cleaning run %s: %w", runID, err)
	}
	return nil
}
