package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// NoteClearGeneration stores gen, the Placement provider generation of the
// all-clear the run's first destructive attempt starts on, before that
// attempt starts. The first one stored stays: while the run is open scour
// writes to the device only with its un-reserve PUT (its own journal,
// PutJournal) and to fence it again after someone else lifted the fence
// (refence, requarantine), so a later generation would only hide someone
// else's write. A run that is not running is ErrRunFinished.
func (s *Store) NoteClearGeneration(ctx context.Context, runID string, gen int) error {
	n, err := s.exec(ctx, `UPDATE cleaning_runs SET clear_gen = COALESCE(clear_gen, ?) WHERE id = ? AND state = 'running' AND ended_at IS NULL`, gen, runID)
	if err == nil && n == 0 {
		err = ErrRunFinished
	}
	if err != nil {
		return fmt.Errorf("claims: record the Placement generation before the first destructive step of cleaning run %s: %w", runID, err)
	}
	return nil
}

// ClearGeneration returns the generation NoteClearGeneration stored for
// the run; ok false when none was (no destructive attempt started, or the
// run was stored before schema v7).
func (s *Store) ClearGeneration(ctx context.Context, runID string) (gen int, ok bool, err error) {
	var g sql.NullInt64
	err = s.r.QueryRowContext(ctx, s.d.rebind(`SELECT clear_gen FROM cleaning_runs WHERE id = ?`), runID).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNoRun
	}
	if err != nil {
		return 0, false, fmt.Errorf("claims: Placement generation of cleaning run %s: %w", runID, err)
	}
	return int(g.Int64), g.Valid, nil
}
