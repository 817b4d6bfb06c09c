package glance

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/images"
	"github.com/scour-project/scour/pipeline"
)

// cleanWith runs one cleaning of addr on be with cfg's pipelines, the
// steps' Glance images coming from g through a fresh cache (nothing
// allocated in Placement).
func cleanWith(t *testing.T, g *harness.Glance, be hardware.Backend, cfg pipeline.Config, cp pipeline.Checkpoints, addr hardware.Address) *pipeline.Result {
	t.Helper()
	c, err := images.OpenCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	src := images.NewGlance(images.StaticClient(images.EndpointClient(g.URL(), "", http.Client{})), c, images.GlanceConfig{Owners: []string{harness.GlanceOwner}, Backoff: time.Millisecond, AllowInsecureImages: true}, nil, nil)
	e, err := pipeline.New(cfg, pipeline.Options{Backend: be, Checkpoints: cp, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Images: images.Steps{Source: src},
		Allocations: pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Clean(t.Context(), pipeline.Target{Address: addr, RPUUID: "rp-" + string(addr)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
