package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

const pluginDir = "/scour-test-plugins"

// fakeRunner is a PluginRunner whose plugins are Go functions keyed by the
// plugin's base name.
type fakeRunner struct {
	mu    sync.Mutex
	clean map[string]func(ctx context.Context, req *plugins.Request) (*plugins.Result, error)
	check map[string]func(ctx context.Context, req *plugins.Request) (*plugins.Result, error)
	// progress steps report each value, then succeed.
	progress map[string][]float64
	calls    []string
}

var _ PluginRunner = (*fakeRunner)(nil)

func newFakeRunner() *fakeRunner {
	return &fakeRunner{clean: map[string]func(context.Context, *plugins.Request) (*plugins.Result, error){},
		check: map[string]func(context.Context, *plugins.Request) (*plugins.Result, error){}}
}

func base(path string) string { return strings.TrimPrefix(path, pluginDir+"/") }

func (f *fakeRunner) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeRunner) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeRunner) Version(context.Context, string) (string, error) {
	return plugins.ProtocolVersion, nil
}

func (f *fakeRunner) Check(ctx context.Context, path, _ string, req *plugins.Request) (*plugins.Result, error) {
	f.mu.Lock()
	fn := f.check[base(path)]
	f.mu.Unlock()
	if fn == nil {
		return plugins.OK(nil), nil
	}
	f.record("CHECK " + base(path))
	return fn(ctx, req)
}

func (f *fakeRunner) Clean(ctx context.Context, path, _ string, req *plugins.Request, progress func(float64)) (*plugins.Result, error) {
	f.record("CLEAN " + base(path))
	f.mu.Lock()
	fn := f.clean[base(path)]
	steps := f.progress[base(path)]
	f.mu.Unlock()
	for _, p := range steps {
		progress(p)
	}
	if fn == nil {
		progress(1)
		return plugins.OK(nil), nil
	}
	return fn(ctx, req)
}

// failN fails n times with code, then succeeds.
func failN(n, code int) func(context.Context, *plugins.Request) (*plugins.Result, error) {
	var mu sync.Mutex
	return func(context.Context, *plugins.Request) (*plugins.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			n--
			return nil, plugins.Errorf(code, "induced failure %d", code)
		}
		return plugins.OK(nil), nil
	}
}

func pluginStep(name string, mods ...func(*Step)) Step {
	s := Step{Name: name, Type: TypePlugin, Path: pluginDir + "/" + name, Retry: Retry{Backoff: time.Millisecond}}
	for _, m := range mods {
		m(&s)
	}
	return s
}

func testConfig(steps ...Step) Config {
	return Config{PluginDirs: []string{pluginDir}, Profiles: []Profile{{
		Name:     "nvme",
		Match:    Match{ResourceClasses: []string{"CUSTOM_NVME"}},
		Pipeline: Pipeline{Name: "wipe", Version: 1, Steps: steps},
	}}}
}

func nvmeDevice(addr hardware.Address) *hardware.Device {
	return &hardware.Device{Address: addr, Kind: hardware.KindNVMe, VendorID: "0x144d", DeviceID: "0xa80a",
		Class: "0x010802", Driver: "vfio-pci", Capabilities: hardware.Capabilities{"pci.reset": {Kind: hardware.KindBool, Bool: true}}}
}

type harness struct {
	e     *Engine
	be    *fakehw.Backend
	pr    *fakeRunner
	cp    *MemCheckpoints
	reg   *prometheus.Registry
	alloc func(ctx context.Context, rp string) (bool, error)
	// dated, when set, is the checker instead of alloc, saying how old
	// each answer is (DatedChecker).
	dated func(ctx context.Context, rp string) (bool, time.Time, error)
	// backend, when set, is the engine's backend around be (a backend
	// with more than fakehw's methods).
	backend func(be *fakehw.Backend) hardware.Backend
}

// datedChecker is the harness's DatedChecker.
type datedChecker struct{ h *harness }

func (d datedChecker) HasAllocations(ctx context.Context, rp string) (bool, error) {
	in, _, err := d.h.dated(ctx, rp)
	return in, err
}

func (d datedChecker) HasAllocationsAsOf(ctx context.Context, rp string) (bool, time.Time, error) {
	return d.h.dated(ctx, rp)
}

func newHarness(t testing.TB, cfg Config, mods ...func(*harness)) *harness {
	t.Helper()
	h := &harness{
		be:    &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) { return nvmeDevice(a), nil }},
		pr:    newFakeRunner(),
		cp:    NewMemCheckpoints(),
		reg:   prometheus.NewRegistry(),
		alloc: func(context.Context, string) (bool, error) { return false, nil },
	}
	for _, m := range mods {
		m(h)
	}
	var alloc AllocationChecker = AllocationCheckerFunc(func(ctx context.Context, rp string) (bool, error) { return h.alloc(ctx, rp) })
	if h.dated != nil {
		alloc = datedChecker{h}
	}
	var be hardware.Backend = h.be
	if h.backend != nil {
		be = h.backend(h.be)
	}
	e, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Checkpoints: h.cp, Plugins: h.pr, Registerer: h.reg,
		Allocations: alloc})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.e = e
	return h
}

func target(n int) Target {
	return Target{Address: hardware.Address(fmt.Sprintf("0000:%02x:00.0", n)), RPUUID: fmt.Sprintf("rp-%d", n), ResourceClass: "CUSTOM_NVME"}
}

func (h *harness) clean(t testing.TB, tg Target) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := h.e.Clean(ctx, tg)
	if err != nil {
		t.Fatalf("Clean(%s): %v", tg.Address, err)
	}
	return res
}

func states(recs []StepRecord) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s=%s ", r.Name, r.State)
	}
	return strings.TrimSpace(b.String())
}

var errBoom = errors.New("boom")
