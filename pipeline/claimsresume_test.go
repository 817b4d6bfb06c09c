package pipeline_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/claims/pipelinestore"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// plugs is a PluginRunner: "b" blocks until its context ends when block
// is set; everything else succeeds.
type plugs struct {
	mu    sync.Mutex
	calls []string
	block func()
}

func (p *plugs) Version(context.Context, string) (string, error) { return plugins.ProtocolVersion, nil }
func (p *plugs) Check(context.Context, string, string, *plugins.Request) (*plugins.Result, error) {
	return plugins.OK(nil), nil
}
func (p *plugs) Clean(ctx context.Context, path, _ string, _ *plugins.Request, _ func(float64)) (*plugins.Result, error) {
	p.mu.Lock()
	p.calls = append(p.calls, path)
	p.mu.Unlock()
	if path == "/plugins/b" && p.block != nil {
		p.block()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return plugins.OK(map[string]any{"from": "plugin"}), nil
}

// TestResumeDefinitionSurvivesClaimsStore: the step-definition hash the
// engine stamps into step records survives the real checkpoint store, so
// a resumed run keeps its done steps when nothing changed and starts over
// when a step's args changed without a version bump.
func TestResumeDefinitionSurvivesClaimsStore(t *testing.T) {
	for _, changed := range []bool{false, true} {
		store, err := claims.Open(context.Background(), claims.Config{StatePath: t.TempDir()}, claims.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		cfg := func(passes int) pipeline.Config {
			return pipeline.Config{PluginDirs: []string{"/plugins"}, Profiles: []pipeline.Profile{{
				Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
				Pipeline: pipeline.Pipeline{Name: "wipe", Version: 1, Steps: []pipeline.Step{
					{Name: "a", Type: pipeline.TypePlugin, Path: "/plugins/a", Args: map[string]any{"passes": passes}},
					{Name: "b", Type: pipeline.TypePlugin, Path: "/plugins/b"},
				}}}}}
		}
		engine := func(c pipeline.Config, pr *plugs) *pipeline.Engine {
			be := &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
				return &hardware.Device{Address: a, Kind: hardware.KindNVMe, Driver: "vfio-pci"}, nil
			}}
			return claimsEngine(t, store, c, be, pr)
		}
		tg := pipeline.Target{Address: "0000:81:00.0", RPUUID: "rp-1", ResourceClass: "CUSTOM_NVME"}
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := engine(cfg(1), &plugs{block: cancel}).Clean(ctx, tg); err == nil {
			t.Fatal("interrupted run reported a verdict")
		}
		passes := 1
		if changed {
			passes = 2
		}
		pr := &plugs{}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := engine(cfg(passes), pr).Clean(ctx2, tg)
		cancel2()
		if err != nil || res.Verdict != pipeline.VerdictClean {
			t.Fatalf("changed=%v: %v %v", changed, res, err)
		}
		if ranA := slices.Contains(pr.calls, "/plugins/a"); ranA != changed {
			t.Fatalf("changed=%v: calls %v", changed, pr.calls)
		}
	}
}

// claimsEngine is an engine on backend be and plugins pr that keeps its
// runs in store (the claims store scourd uses), on a device Placement
// always shows free.
func claimsEngine(t *testing.T, store *claims.Store, c pipeline.Config, be hardware.Backend, pr pipeline.PluginRunner) *pipeline.Engine {
	t.Helper()
	e, err := pipeline.New(c, pipeline.Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Plugins: pr,
		Checkpoints: &pipelinestore.Checkpoints{Store: store, Host: "compute-1"},
		Allocations: pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
