package pipeline_test

import (
	"context"
	"testing"

	"github.com/scour-project/scour/pipeline"
)

// reopening loads the file store afresh for every call.
type reopening struct {
	t    *testing.T
	path string
}

func (r reopening) cp() *pipeline.MemCheckpoints {
	cp, err := pipeline.OpenFileCheckpoints(r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	return cp
}

func (r reopening) OpenRun(ctx context.Context, s pipeline.RunStart) (pipeline.Run, []pipeline.StepRecord, error) {
	return r.cp().OpenRun(ctx, s)
}

func (r reopening) StepStarted(ctx context.Context, id string, rec pipeline.StepRecord) error {
	return r.cp().StepStarted(ctx, id, rec)
}

func (r reopening) StepProgress(ctx context.Context, id string, i int, f float64) error {
	return r.cp().StepProgress(ctx, id, i, f)
}

func (r reopening) StepFinished(ctx context.Context, id string, rec pipeline.StepRecord) error {
	return r.cp().StepFinished(ctx, id, rec)
}

func (r reopening) FinishRun(ctx context.Context, id string, res pipeline.Result) error {
	return r.cp().FinishRun(ctx, id, res)
}
