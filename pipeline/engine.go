package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/builtin"
	"github.com/scour-project/scour/plugins/runner"
)

// ErrAlreadyRunning: a run for this device is in progress in this process.
var ErrAlreadyRunning = errors.New("a cleaning run is already in progress for this device")

// AllocationChecker asks Placement whether a resource provider has
// allocations. The engine calls it immediately before every destructive
// step (alongside the step's CHECK, which waits for its answer), and
// before every retry of one; an allocation aborts the run without
// touching the device.
type AllocationChecker interface {
	HasAllocations(ctx context.Context, rpUUID string) (bool, error)
}

// RetiredChecker is an optional AllocationChecker capability for an
// operator's retirement run (Engine.Retire), whose device is quarantined
// on purpose: HasAllocationsRetired reports true unless Placement shows
// it reserved, quarantined and without an allocation. A checker without
// it is asked HasAllocations.
type RetiredChecker interface {
	HasAllocationsRetired(ctx context.Context, rpUUID string) (bool, error)
}

// DatedChecker is an optional AllocationChecker capability:
// HasAllocationsAsOf answers as HasAllocations does and says how old the
// answer is: when the Placement request it came from began. An answer
// taken from an earlier read (placement.Gate's reuse of a release's read)
// is as old as that read. The engine measures from it how old the answer
// is when the destructive step starts (placementAnswerMaxAge); for a
// checker without it, from just before HasAllocations was called.
type DatedChecker interface {
	HasAllocationsAsOf(ctx context.Context, rpUUID string) (inUse bool, asOf time.Time, err error)
}

// AllocationCheckerFunc adapts a function to AllocationChecker.
type AllocationCheckerFunc func(ctx context.Context, rpUUID string) (bool, error)

// HasAllocations implements AllocationChecker.
func (f AllocationCheckerFunc) HasAllocations(ctx context.Context, rp string) (bool, error) {
	return f(ctx, rp)
}

// PluginRunner runs executable plugins (plugins/runner.Runner).
type PluginRunner interface {
	Version(ctx context.Context, path string) (string, error)
	Check(ctx context.Context, path, version string, req *plugins.Request) (*plugins.Result, error)
	Clean(ctx context.Context, path, version string, req *plugins.Request, progress func(float64)) (*plugins.Result, error)
}

var _ PluginRunner = (*runner.Runner)(nil)

// pluginPreflighter is a PluginRunner that can check a plugin's
// installation (file, owner, mode, protocol version) without running a
// step; New checks every plugin step with it.
type pluginPreflighter interface {
	Preflight(ctx context.Context, path string) error
}

var _ pluginPreflighter = (*runner.Runner)(nil)

// Options are the engine's dependencies.
type Options struct {
	Backend     hardware.Backend
	Checkpoints Checkpoints
	Allocations AllocationChecker
	// Plugins defaults to a runner.Runner limited to Config.PluginDirs.
	Plugins PluginRunner
	// Images resolves Glance image references of steps that put a golden
	// image on a device (fpga-program); nil: only local files.
	Images builtin.ImageResolver
	// Registerer receives the engine's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Engine runs cleaning pipelines.
type Engine struct {
	cfg     Config
	be      hardware.Backend
	cp      Checkpoints
	alloc   AllocationChecker
	plugins PluginRunner
	images  builtin.ImageResolver
	m       *metrics
	log     *slog.Logger

	hostSlots chan struct{}
	hostBound chan struct{} // slots of host-bound steps
	// slotWaiting, when set (tests), is called as a step starts waiting
	// for a host-bound slot.
	slotWaiting func()
	// progressEvery is the least time between two progress checkpoints of
	// a step, and before its first one.
	progressEvery time.Duration
	profSlots     map[string]chan struct{}
	// placementAnswerMaxAge is how old Placement's all-clear may be when
	// a destructive attempt or a driver unbind starts (run.clearNow; the
	// capability look's youngAllClear). The age counts from when the
	// answer's request began (DatedChecker); an older answer is asked
	// again.
	placementAnswerMaxAge time.Duration
	// sleep waits between a step's tries (tests record the waits).
	sleep func(ctx context.Context, d time.Duration) bool

	mu      sync.Mutex
	running map[hardware.Address]bool
}

// maxPlacementAnswerAge: a CHECK takes tens to hundreds of
// milliseconds; one that outlasts Placement's answer by more (a slow
// plugin, a loaded host, a slow driver bind) has Placement asked again
// before the step. It bounds every all-clear a step starts on, a fresh
// one and one the checker took from an earlier read alike.
const maxPlacementAnswerAge = time.Second

// progressCheckpointEvery spaces a step's progress checkpoints: each is a
// committed write, and most steps end sooner.
const progressCheckpointEvery = 5 * time.Second

// New validates cfg and builds an Engine.
func New(cfg Config, o Options) (*Engine, error) {
	cfg.setDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Backend == nil || o.Checkpoints == nil || o.Allocations == nil {
		errs = append(errs, errors.New("pipeline: Backend, Checkpoints and Allocations are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.Plugins == nil && len(cfg.PluginDirs) > 0 {
		r, err := runner.New(runner.Config{Dirs: cfg.PluginDirs})
		if err != nil {
			return nil, err
		}
		o.Plugins = r
	}
	if err := preflight(cfg, o.Plugins); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, be: o.Backend, cp: o.Checkpoints, alloc: o.Allocations, plugins: o.Plugins, images: o.Images,
		m: m, log: o.Logger, hostSlots: make(chan struct{}, cfg.MaxConcurrent),
		hostBound: make(chan struct{}, cfg.MaxHostBoundSteps), progressEvery: progressCheckpointEvery, placementAnswerMaxAge: maxPlacementAnswerAge,
		profSlots: map[string]chan struct{}{}, running: map[hardware.Address]bool{}, sleep: sleep}
	for _, p := range cfg.Profiles {
		// Both series exist from the start: an alert on increase() sees
		// a device's first unwiped retirement.
		e.m.retirements.WithLabelValues(p.Name, "true")
		e.m.retirements.WithLabelValues(p.Name, "false")
		if p.MaxConcurrent > 0 {
			e.profSlots[p.Name] = make(chan struct{}, p.MaxConcurrent)
		}
	}
	return e, nil
}

// Clean runs the device's pipeline (resuming its open run if any) and
// returns the verdict. A non-nil error means no verdict could be reached
// or stored (ErrAlreadyRunning, checkpoint store down, ctx cancelled): the
// device stays reserved and the caller retries later.
func (e *Engine) Clean(ctx context.Context, t Target) (*Result, error) {
	return e.clean(ctx, t, retireNone)
}

// Retire runs (or resumes) an operator's retirement of a device not
// cleaned since its last tenant: instead of the pipeline, a run of its
// retirement wipe alone (the step of a worn drive's retirement: the
// pipeline's retire_wipe, or nvme-erase with the strongest technique),
// through the ordinary step path (Placement asked first, rule 2;
// checkpoints, rule 5). Its verdict is quarantine with the Retirement
// (wiped, or RETIRED UNWIPED), retry-later for a retryable wipe failure,
// or aborted when Placement showed an allocation: nothing was erased. With
// noWipe (scourctl retire --no-wipe) nothing touches the device: the run
// records its wipe skipped, NOT WIPED (operator chose --no-wipe), and the
// retirement counts unwiped. reason says who retired it and why.
func (e *Engine) Retire(ctx context.Context, t Target, reason string, noWipe bool) (*Result, error) {
	mode := retireWipe
	if noWipe {
		mode = retireNoWipe
	}
	t.retireReason = reason
	return e.clean(ctx, t, mode)
}

func (e *Engine) clean(ctx context.Context, t Target, mode retireMode) (*Result, error) {
	if t.Address == "" || t.RPUUID == "" {
		// Without its resource provider the allocation check before
		// destructive steps would ask about nothing.
		return nil, fmt.Errorf("clean target %q: address and resource provider UUID are required", t.Address)
	}
	if !e.claim(t.Address) {
		return nil, fmt.Errorf("device %s: %w", t.Address, ErrAlreadyRunning)
	}
	defer e.release(t.Address)
	started := time.Now()
	log := e.log.With("device", t.Address, "rp", t.RPUUID)

	dev, err := e.be.Discover(ctx, t.Address)
	if err != nil {
		return nil, fmt.Errorf("discovering device %s before cleaning: %w", t.Address, err)
	}
	prof, why := e.cfg.match(t, dev)
	if prof == nil {
		if name := e.cfg.lookProfile(t, dev); name != "" {
			looked, skipped, err := e.lookOnNVMe(ctx, t, dev, name)
			if err != nil {
				return nil, err
			}
			if looked != nil {
				dev = looked
				prof, why = e.cfg.match(t, dev)
			} else {
				why = append(why, skipped)
			}
		}
	}
	if prof == nil {
		res := &Result{Verdict: VerdictNoProfile, Device: string(t.Address), Duration: time.Since(started),
			Reason: fmt.Sprintf("no cleaning profile matches %s (resource class %s, %s:%s, class %s); it stays reserved until a profile is configured: %v",
				t.Address, t.ResourceClass, dev.VendorID, dev.DeviceID, dev.Class, why)}
		e.m.runs.WithLabelValues("", string(res.Verdict)).Inc()
		log.Warn("no cleaning profile matches device", "reason", res.Reason)
		return res, nil
	}
	release, err := e.acquire(ctx, prof.Name)
	if err != nil {
		return nil, fmt.Errorf("device %s waiting for a cleaning slot: %w", t.Address, err)
	}
	defer release()
	e.m.inFlight.Inc()
	defer e.m.inFlight.Dec()

	r := &run{e: e, t: t, dev: dev, prof: prof, def: definition(&prof.Pipeline), retiring: mode, log: log.With("profile", prof.Name, "pipeline", prof.Pipeline.Name)}
	if mode != retireNone {
		r.def = "retirement: " + r.def
	}
	res, err := r.execute(ctx)
	if err != nil {
		return nil, err
	}
	res.Duration = time.Since(started)
	if err := e.cp.FinishRun(ctx, res.RunID, *res); err != nil {
		return nil, fmt.Errorf("device %s: storing verdict %s of run %s: %w", t.Address, res.Verdict, res.RunID, err)
	}
	e.m.runs.WithLabelValues(prof.Name, string(res.Verdict)).Inc()
	if res.Retirement != nil {
		e.m.retirements.WithLabelValues(prof.Name, strconv.FormatBool(res.Retirement.Wiped)).Inc()
	}
	r.log.Info("cleaning run finished", "verdict", res.Verdict, "run", res.RunID, "step", res.Step, "reason", res.Reason)
	return res, nil
}

func (e *Engine) claim(a hardware.Address) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running[a] {
		return false
	}
	e.running[a] = true
	return true
}

func (e *Engine) release(a hardware.Address) {
	e.mu.Lock()
	delete(e.running, a)
	e.mu.Unlock()
}

// acquire takes the profile's slot, then a host slot: waiting for a busy
// profile must not hold a host slot other profiles could use.
func (e *Engine) acquire(ctx context.Context, profile string) (func(), error) {
	ps := e.profSlots[profile]
	if ps != nil {
		select {
		case ps <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case e.hostSlots <- struct{}{}:
	case <-ctx.Done():
		if ps != nil {
			<-ps
		}
		return nil, ctx.Err()
	}
	return func() {
		<-e.hostSlots
		if ps != nil {
			<-ps
		}
	}, nil
}

// hostBoundSlot waits for a host-bound slot. waited says whether it had
// to wait for one (the check before a destructive step is then as old as
// the wait: see run.hostSlot).
func (e *Engine) hostBoundSlot(ctx context.Context) (release func(), waited bool, err error) {
	select {
	case e.hostBound <- struct{}{}:
		return func() { <-e.hostBound }, false, nil
	default:
	}
	if e.slotWaiting != nil {
		e.slotWaiting()
	}
	select {
	case e.hostBound <- struct{}{}:
		return func() { <-e.hostBound }, true, nil
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// Preflight checks cfg's plugin steps as New does (file, owner, mode,
// VERSION, which must not touch any device), with no backend or store:
// scourd --check-config runs it, so a plugin that is missing or not
// executable is found before scourd starts. Steps whose path Validate
// refuses are left to Validate's error.
func Preflight(cfg Config) error {
	cfg.setDefaults()
	if len(cfg.PluginDirs) == 0 {
		return nil // a plugin step without plugin_dirs is Validate's error
	}
	r, err := runner.New(runner.Config{Dirs: cfg.PluginDirs})
	if err != nil {
		return err
	}
	return preflight(cfg, r)
}

// preflight checks every plugin step's file and protocol version once, so
// a bad plugin deployment stops the service at start with every problem
// listed instead of failing devices one by one.
func preflight(cfg Config, pr PluginRunner) error {
	pf, ok := pr.(pluginPreflighter)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	seen := map[string]error{}
	for _, p := range cfg.Profiles {
		for _, s := range p.Pipeline.Steps {
			for _, path := range s.pluginPaths() {
				if path == "" || !inDirs(path, cfg.PluginDirs) {
					continue // Validate reports these
				}
				err, done := seen[path]
				if !done {
					err = pf.Preflight(ctx, path)
					seen[path] = err
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("profile %s, pipeline %s, step %s: %v", p.Name, p.Pipeline.Name, s.Name, plugins.AsError(err).Msg))
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("pipeline: plugin deployment problems (fix them, then restart):\n%w", errors.Join(errs...))
}
