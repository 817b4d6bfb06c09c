package pipelinestore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

const pluginDir = "/scour-test-plugins"

// fakePlugins is a pipeline.PluginRunner whose plugins are Go functions.
type fakePlugins struct {
	mu    sync.Mutex
	clean map[string]func(ctx context.Context) (*plugins.Result, error)
	calls []string
}

func (f *fakePlugins) Version(context.Context, string) (string, error) {
	return plugins.ProtocolVersion, nil
}

func (f *fakePlugins) Check(context.Context, string, string, *plugins.Request) (*plugins.Result, error) {
	return plugins.OK(nil), nil
}

func (f *fakePlugins) Clean(ctx context.Context, path, _ string, _ *plugins.Request, progress func(float64)) (*plugins.Result, error) {
	name := strings.TrimPrefix(path, pluginDir+"/")
	f.mu.Lock()
	f.calls = append(f.calls, name)
	fn := f.clean[name]
	f.mu.Unlock()
	progress(0.5)
	if fn == nil {
		return plugins.OK(map[string]any{"step": name}), nil
	}
	return fn(ctx)
}

func (f *fakePlugins) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func step(name string, required bool) pipeline.Step {
	return pipeline.Step{Name: name, Type: pipeline.TypePlugin, Path: pluginDir + "/" + name, Required: &required,
		Retry: pipeline.Retry{Backoff: time.Millisecond}}
}

func config(steps ...pipeline.Step) pipeline.Config {
	return pipeline.Config{PluginDirs: []string{pluginDir}, Profiles: []pipeline.Profile{{
		Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
		Pipeline: pipeline.Pipeline{Name: "wipe", Version: 2, Steps: steps},
	}}}
}

// optionalFrom answers Checkpoints.Optional from the pipeline config, as
// the service wiring does.
func optionalFrom(cfg pipeline.Config) func(pipeline.RunStart, int) bool {
	return func(start pipeline.RunStart, i int) bool {
		for _, p := range cfg.Profiles {
			if p.Name == start.Profile && i < len(p.Pipeline.Steps) {
				r := p.Pipeline.Steps[i].Required
				return r != nil && !*r
			}
		}
		return false
	}
}

var target = pipeline.Target{Address: "0000:81:00.0", RPUUID: "rp-nvme-0", ResourceClass: "CUSTOM_NVME"}

func openStore(t testing.TB, dir string) *claims.Store {
	t.Helper()
	s, err := claims.Open(context.Background(), claims.Config{StatePath: dir}, claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func engine(t *testing.T, cfg pipeline.Config, s *claims.Store, pr *fakePlugins) *pipeline.Engine {
	t.Helper()
	return engineOn(t, cfg, s, pr, nvmeWithSerial(""))
}

// nvmeWithSerial discovers an NVMe on vfio-pci showing serial (from VPD).
func nvmeWithSerial(serial string) *fakehw.Backend {
	return &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
		d := &hardware.Device{Address: a, Kind: hardware.KindNVMe, VendorID: "0x144d", DeviceID: "0xa80a", Class: "0x010802", Driver: "vfio-pci"}
		if serial != "" {
			d.Serial, d.Model = serial, "PM9A3"
		}
		return d, nil
	}}
}

func engineOn(t *testing.T, cfg pipeline.Config, s *claims.Store, pr *fakePlugins, be *fakehw.Backend) *pipeline.Engine {
	t.Helper()
	return engineWith(t, cfg, s, pr, be, nil)
}

// engineWith is engineOn asking alloc before destructive steps (nil: a
// checker that always answers all-clear and knows no generations).
func engineWith(t *testing.T, cfg pipeline.Config, s *claims.Store, pr *fakePlugins, be *fakehw.Backend, alloc pipeline.AllocationChecker) *pipeline.Engine {
	t.Helper()
	if alloc == nil {
		alloc = pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })
	}
	e, err := pipeline.New(cfg, pipeline.Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Plugins: pr,
		Checkpoints: &Checkpoints{Store: s, Host: "compute-1", Trigger: "test", Optional: optionalFrom(cfg)},
		Allocations: alloc})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func summary(steps []claims.Step) string {
	var b []string
	for _, st := range steps {
		b = append(b, fmt.Sprintf("%d:%s#%d=%s", st.Index, st.Name, st.Attempt, st.Outcome))
	}
	return strings.Join(b, " ")
}

// TestEngineResumesFromStoreAfterShutdown runs the real engine on the real
// store: a shutdown mid-step leaves the run open; a new engine on a
// reopened store resumes it, does not repeat the finished step, re-runs the
// interrupted one from its start, and stores a cleaned record naming the
// previous tenant (returned only comes with the un-reserve).
func TestEngineResumesFromStoreAfterShutdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(step("sanitize", true), step("verify", true))
	s := openStore(t, dir)
	if _, err := s.RecordClaim(context.Background(), claims.Claim{Host: "compute-1", InstanceUUID: "inst-1", ProjectID: "proj-a",
		PCI: []claims.PCIDevice{{RPUUID: "rp-nvme-0", Address: "0000:81:00.0"}}}); err != nil {
		t.Fatal(err)
	}
	s.ReleaseInstance(context.Background(), "compute-1", "inst-1", "instance.delete.end", "m")

	ctx, cancel := context.WithCancel(context.Background())
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"verify": func(ctx context.Context) (*plugins.Result, error) { cancel(); <-ctx.Done(); return nil, ctx.Err() },
	}}
	if res, err := engine(t, cfg, s, pr).Clean(ctx, target); err == nil {
		t.Fatalf("shutdown mid-step returned a verdict: %+v", res)
	}
	s.Close()

	s = openStore(t, dir)
	pr2 := &fakePlugins{}
	res, err := engine(t, cfg, s, pr2).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("resumed Clean = %+v, %v", res, err)
	}
	if got := pr2.Calls(); !slices.Equal(got, []string{"verify"}) {
		t.Fatalf("resumed run called %v; want only verify (sanitize was done)", got)
	}
	steps, _ := s.Steps(context.Background(), res.RunID)
	if got, want := summary(steps), "0:sanitize#1=ok 1:verify#1=interrupted 1:verify#2=ok"; got != want {
		t.Fatalf("steps = %s, want %s", got, want)
	}
	rec, err := s.Record(context.Background(), res.RunID)
	if err != nil || rec.Result.State != "cleaned" || rec.EndedAt != nil || rec.PreviousTenant.InstanceUUID != "inst-1" || rec.Method.Profile != "nvme" ||
		!slices.Equal(rec.Method.PlannedSteps, []string{"sanitize", "verify"}) || rec.Method.PipelineVersion != "2" || rec.Attempt != 1 {
		t.Fatalf("record = %+v, %v", rec, err)
	}
}

func TestEngineVerdictsInStore(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	failing := func(code int) func(context.Context) (*plugins.Result, error) {
		return func(context.Context) (*plugins.Result, error) { return nil, plugins.Errorf(code, "induced %d", code) }
	}
	// An optional step that fails does not stop a clean verdict.
	pr := &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){"smart": failing(plugins.CodeUnsupported)}}
	res, err := engine(t, config(step("sanitize", true), step("smart", false)), s, pr).Clean(ctx, target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("optional failure: %+v, %v", res, err)
	}
	// A retryable failure ends the run as failed; the next run is attempt 2.
	pr = &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){"sanitize": failing(plugins.CodeTryAgainLater)}}
	e := engine(t, config(step("sanitize", true)), s, pr)
	for attempt, want := range []pipeline.Verdict{pipeline.VerdictRetryLater, pipeline.VerdictRetryLater, pipeline.VerdictQuarantine} {
		res, err := e.Clean(ctx, target)
		if err != nil || res.Verdict != want || res.Attempt != attempt+1 {
			t.Fatalf("run %d = %+v, %v; want %s", attempt+1, res, err, want)
		}
		run, _ := s.GetRun(ctx, res.RunID)
		wantState := map[pipeline.Verdict]claims.RunState{pipeline.VerdictRetryLater: claims.RunFailed, pipeline.VerdictQuarantine: claims.RunQuarantined}[want]
		if run.State != wantState || !strings.Contains(run.Summary, "induced") {
			t.Fatalf("stored run = %+v", run)
		}
		steps, _ := s.Steps(ctx, res.RunID)
		if len(steps) != 1 || steps[0].Code != plugins.CodeTryAgainLater || steps[0].Outcome != claims.StepFailed {
			t.Fatalf("stored steps = %+v", steps)
		}
	}
	// A clean verdict the store cannot back (a required step failed) is
	// refused: without Optional, the store treats every step as required.
	run, _, _ := (&Checkpoints{Store: s, Host: "compute-1"}).OpenRun(ctx, pipeline.RunStart{Device: "0000:82:00.0", RPUUID: "rp-x", Steps: []string{"a"}})
	cp := &Checkpoints{Store: s, Host: "compute-1"}
	if err := cp.StepFinished(ctx, run.ID, pipeline.StepRecord{Index: 0, Name: "a", State: pipeline.StepFailed, Code: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cp.FinishRun(ctx, run.ID, pipeline.Result{Verdict: pipeline.VerdictClean}); err == nil {
		t.Fatal("store accepted a clean verdict after a failed required step")
	}
}

// rebindable is an NVMe found on driver, bound where the engine binds it;
// show fills what discovery sees on the driver it is on.
func rebindable(driver string, show func(*hardware.Device)) *fakehw.Backend {
	var mu sync.Mutex
	return &fakehw.Backend{
		DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			mu.Lock()
			defer mu.Unlock()
			d := &hardware.Device{Address: a, Kind: hardware.KindNVMe, VendorID: "0x144d", DeviceID: "0xa80a", Class: "0x010802", Driver: driver}
			show(d)
			return d, nil
		},
		BindDriverF: func(_ context.Context, _ hardware.Address, drv string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			prev := driver
			driver = drv
			return prev, nil
		},
	}
}

// TestSerialLearnedOnStepDriver: an NVMe on vfio-pci shows no serial or
// model; the run's record gets them from the step that binds nvme.
func TestSerialLearnedOnStepDriver(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	be := rebindable("vfio-pci", func(d *hardware.Device) {
		d.VendorID, d.DeviceID = "0x1b36", "0x0010"
		if d.Driver == "nvme" {
			d.Serial, d.Model = "QEMU-S1", "QEMU NVMe Ctrl"
		}
	})
	st := step("wipe", true)
	st.Driver = "nvme"
	cfg := config(st)
	e, err := pipeline.New(cfg, pipeline.Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Plugins: &fakePlugins{},
		Checkpoints: &Checkpoints{Store: s, Host: "compute-1", Trigger: "test", Optional: optionalFrom(cfg)},
		Allocations: pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Clean(ctx, target)
	if err != nil || res.Verdict != pipeline.VerdictClean {
		t.Fatalf("%+v, %v", res, err)
	}
	run, err := s.GetRun(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Serial != "QEMU-S1" || run.Model != "QEMU NVMe Ctrl" || res.Serial != "QEMU-S1" {
		t.Fatalf("record serial %q model %q, result serial %q", run.Serial, run.Model, res.Serial)
	}
	if err := s.SetRunIdentity(ctx, res.RunID, "X", "Y", "Z"); err == nil {
		t.Fatal("a finished run's identity was changed")
	}
}
