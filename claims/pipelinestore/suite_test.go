package pipelinestore

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/checkpointstest"
)

// TestCheckpointsSuite runs the shared pipeline.Checkpoints suite on the
// store scourd uses, on both databases it supports. It differs from the
// in-memory store in two ways the engine allows (checkpointstest.Options):
// a cleaned run stays open, and is resumed, until the caller's un-reserve
// succeeded and it marked the run returned; and a quarantine verdict
// restarts the attempt count (claims.Store counts runs since the last
// cleaned or quarantined one: an unquarantined device gets a full budget).
func TestCheckpointsSuite(t *testing.T) {
	for _, db := range []struct {
		name string
		cfg  func(t *testing.T) claims.Config
	}{
		{claims.DriverSQLite, func(t *testing.T) claims.Config {
			return claims.Config{Driver: claims.DriverSQLite, StatePath: filepath.Join(t.TempDir(), "state")}
		}},
		{claims.DriverPostgres, func(t *testing.T) claims.Config {
			return claims.Config{Driver: claims.DriverPostgres, DSN: testkit.PostgresSchema(t)}
		}},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			checkpointstest.RunWith(t, suiteOptions, func(t *testing.T) pipeline.Checkpoints {
				s, err := claims.Open(context.Background(), db.cfg(t), claims.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return &Checkpoints{Store: s, Host: "compute-1"}
			})
		})
	}
}

var suiteOptions = checkpointstest.Options{
	Return: func(t *testing.T, cp pipeline.Checkpoints, run pipeline.Run) {
		if err := cp.(*Checkpoints).Store.MarkReturned(context.Background(), run.ID, "un-reserved"); err != nil {
			t.Fatal(err)
		}
	},
	QuarantineResetsAttempts: true,
}
