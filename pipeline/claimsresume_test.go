package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/claims/pipelinestore"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// plugs is a PluginRunner: "b" blocks until its context ends when block
// is set; everything else succeeds, reporting an erase (a clear run needs
// one).
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
	return plugins.OK(map[string]any{"from": "plugin", plugins.TechniqueKey: "overwrite, 1 pass of 0x00"}), nil
}

// TestResumeDefinitionSurvivesClaimsStore: the step-definition hash the
// engine stamps into step records survives the real checkpoint store, so
// a resumed run keeps its done steps when nothing changed and starts over
// when a step's args changed without a version bump.
func TestResumeDefinitionSurvivesClaimsStore(t *testing.T) {
	for _, changed := range []bool{false, true} {
		store := openClaims(t, claims.Config{StatePath: t.TempDir()})
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

// claimsStores open a fresh claims store of each backend scourd ships
// (PostgreSQL skips under -short).
var claimsStores = map[string]func(t *testing.T) claims.Config{
	claims.DriverSQLite: func(t *testing.T) claims.Config { return claims.Config{StatePath: t.TempDir()} },
	claims.DriverPostgres: func(t *testing.T) claims.Config {
		return claims.Config{Driver: claims.DriverPostgres, DSN: testkit.PostgresSchema(t)}
	},
}

// TestResumeRequiresSameCategory: the claims store judges a run's verdict
// by the category stored when it opened. A run interrupted in its first
// step (nothing done yet) whose pipeline's category changed meanwhile
// without a version bump is closed superseded and a new run opens under
// the new category; an unchanged one resumes. Found in review (rev1
// Low 7: the old, weaker category judged the resumed run).
func TestResumeRequiresSameCategory(t *testing.T) {
	for name, storeCfg := range claimsStores {
		for _, changed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/changed=%v", name, changed), func(t *testing.T) {
				store := openClaims(t, storeCfg(t))
				cfg := func(category string) pipeline.Config {
					return pipeline.Config{PluginDirs: []string{"/plugins"}, Profiles: []pipeline.Profile{{
						Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
						Pipeline: pipeline.Pipeline{Name: "wipe", Version: 1, Category: category, Steps: []pipeline.Step{
							{Name: "b", Type: pipeline.TypePlugin, Path: "/plugins/b"}, // where scourd stops
						}}}}}
				}
				be := &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
					return &hardware.Device{Address: a, Kind: hardware.KindNVMe, Driver: "vfio-pci"}, nil
				}}
				tg := pipeline.Target{Address: "0000:81:00.0", RPUUID: "rp-1", ResourceClass: "CUSTOM_NVME"}
				ctx, cancel := context.WithCancel(context.Background())
				if _, err := claimsEngine(t, store, cfg(""), be, &plugs{block: cancel}).Clean(ctx, tg); err == nil {
					t.Fatal("interrupted run reported a verdict")
				}
				open, err := store.UnfinishedRuns(context.Background(), "compute-1")
				if err != nil || len(open) != 1 {
					t.Fatalf("open runs %v, %v: want the interrupted one", open, err)
				}
				category := ""
				if changed {
					category = pipeline.CategoryClear
				}
				ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel2()
				res, err := claimsEngine(t, store, cfg(category), be, &plugs{}).Clean(ctx2, tg)
				if err != nil || res.Verdict != pipeline.VerdictClean {
					t.Fatalf("second run: %v, %v", res, err)
				}
				if resumed := res.RunID == open[0].ID; resumed == changed {
					t.Fatalf("changed=%v: verdict in run %s, interrupted run %s: want it resumed only when the category is the same", changed, res.RunID, open[0].ID)
				}
				if !changed {
					return
				}
				old, err := store.GetRun(context.Background(), open[0].ID)
				if err != nil || !strings.Contains(old.Summary, "category") {
					t.Fatalf("superseded run %+v, %v: want its summary to name the category", old, err)
				}
				now, err := store.GetRun(context.Background(), res.RunID)
				if err != nil || now.Category != pipeline.CategoryClear {
					t.Fatalf("new run %+v, %v: want category %s", now, err, pipeline.CategoryClear)
				}
			})
		}
	}
}

// openClaims opens a claims store closed when the test ends.
func openClaims(t *testing.T, cfg claims.Config) *claims.Store {
	t.Helper()
	store, err := claims.Open(context.Background(), cfg, claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
