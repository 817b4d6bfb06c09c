package pipeline_test

import (
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/checkpointstest"
)

func TestMemCheckpoints(t *testing.T) {
	checkpointstest.Run(t, func(*testing.T) pipeline.Checkpoints { return pipeline.NewMemCheckpoints() })
}

// The file store passes the suite, and so does a store re-opened from its
// file after every call (what a restarted process sees).
func TestFileCheckpoints(t *testing.T) {
	checkpointstest.Run(t, func(t *testing.T) pipeline.Checkpoints {
		cp, err := pipeline.OpenFileCheckpoints(filepath.Join(t.TempDir(), "cp.json"))
		if err != nil {
			t.Fatal(err)
		}
		return cp
	})
	checkpointstest.Run(t, func(t *testing.T) pipeline.Checkpoints {
		return reopening{t: t, path: filepath.Join(t.TempDir(), "cp.json")}
	})
}
