package app

import (
	"context"
	"log/slog"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/claims/pipelinestore"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/placement"
	"github.com/scour-project/scour/plugins"
)

// The claims store journals un-reserve PUTs for the Placement client: both
// must mean the same by a PUT at an unrecorded generation (the v6
// migration writes it), and the store's journal must be one the client
// takes.
var _ placement.PutJournal = claims.PutJournal{}

func TestUnknownPutGenerationAgrees(t *testing.T) {
	if claims.UnknownPutGeneration != placement.UnknownPutGeneration {
		t.Fatalf("claims.UnknownPutGeneration = %d, placement.UnknownPutGeneration = %d", claims.UnknownPutGeneration, placement.UnknownPutGeneration)
	}
}

// okPlugins is a pipeline.PluginRunner whose every plugin succeeds.
type okPlugins struct{}

func (okPlugins) Version(context.Context, string) (string, error) {
	return plugins.ProtocolVersion, nil
}
func (okPlugins) Check(context.Context, string, string, *plugins.Request) (*plugins.Result, error) {
	return plugins.OK(nil), nil
}
func (okPlugins) Clean(context.Context, string, string, *plugins.Request, func(float64)) (*plugins.Result, error) {
	return plugins.OK(nil), nil
}

// The record of a run names what made the reconciler clean the device
// (here the release of an instance), not a fixed "scourd reconciler".
func TestRecordNamesItsTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, store := testCleaner(t)
	for _, tt := range []struct{ dev, rp, trigger, want string }{
		{"0000:81:00.0", "rp-1", "release of instance inst-1", "scourd reconciler: release of instance inst-1"},
		{"0000:82:00.0", "rp-2", "interval", "scourd reconciler: periodic scan"},
	} {
		res, err := c.Clean(ctx, handlers.CleanRequest{Device: handlers.Device{RPUUID: tt.rp, Address: hardware.Address(tt.dev), ResourceClass: "CUSTOM_NVME"},
			Trigger: tt.trigger})
		if err != nil || res.Verdict != pipeline.VerdictClean {
			t.Fatalf("clean %s: %+v %v", tt.dev, res, err)
		}
		rec, err := store.Record(ctx, res.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.TriggeredBy != tt.want {
			t.Errorf("record of a run triggered by %q says triggered_by %q; want %q", tt.trigger, rec.TriggeredBy, tt.want)
		}
	}
}

// testCleaner is the cleaner over a real engine (one plugin step that
// succeeds) and a sqlite claims store opened with opts.
func testCleaner(t *testing.T, opts ...claims.Option) (handlers.EngineCleaner, *claims.Store) {
	t.Helper()
	store, err := claims.Open(context.Background(), claims.Config{StatePath: t.TempDir()}, append([]claims.Option{claims.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := pipeline.Config{PluginDirs: []string{"/plugins"}, Profiles: []pipeline.Profile{{
		Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
		Pipeline: pipeline.Pipeline{Name: "wipe", Version: 1, Steps: []pipeline.Step{{Name: "a", Type: pipeline.TypePlugin, Path: "/plugins/a"}}}}}}
	be := &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
		return &hardware.Device{Address: a, Kind: hardware.KindNVMe, Driver: "vfio-pci"}, nil
	}}
	eng, err := pipeline.New(cfg, pipeline.Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Plugins: okPlugins{},
		Checkpoints: &pipelinestore.Checkpoints{Store: store, Host: "compute-1", Trigger: "scourd reconciler"},
		Allocations: pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	return handlers.EngineCleaner{Engine: eng, Records: store, Host: "compute-1"}, store
}
