package pipelinestore

import (
	"context"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/plugins"
)

// TestRecordShowsRetriesWithinAStep: a step that failed once with a
// retryable code and then succeeded is recorded as two tries with the
// first one's error, not as one clean attempt.
func TestRecordShowsRetriesWithinAStep(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	sanitize := step("sanitize", true)
	sanitize.Retry.Attempts = 2
	cfg := config(sanitize)
	failed := false
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"sanitize": func(context.Context) (*plugins.Result, error) {
			if !failed {
				failed = true
				return nil, plugins.Errorf(plugins.CodeTimeout, "sanitize ran past its deadline")
			}
			return plugins.OK(nil), nil
		},
	}}
	res, err := engine(t, cfg, s, pr).Clean(ctx, target)
	if err != nil || !res.Clean() {
		t.Fatalf("Clean = %+v, %v", res, err)
	}
	rec, err := s.Record(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Method.Steps) != 1 {
		t.Fatalf("steps %+v", rec.Method.Steps)
	}
	st := rec.Method.Steps[0]
	if st.Outcome != string(claims.StepOK) || st.Tries == nil || st.Tries.Count != 2 || len(st.Tries.EarlierErrors) != 1 ||
		!strings.Contains(st.Tries.EarlierErrors[0], "sanitize ran past its deadline (code 15)") {
		t.Fatalf("step %s outcome %s tries %+v, want ok after 2 tries, the first timed out", st.Name, st.Outcome, st.Tries)
	}
}
