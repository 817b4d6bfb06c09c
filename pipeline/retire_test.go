package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/plugins"
)

// retireRig is a simulated host with one worn NVMe (95 % used; the
// pipeline's wear check retires at 90 %) and the engine that cleans it.
type retireRig struct {
	s      *sim.Simulator
	e      *Engine
	reg    *prometheus.Registry
	allocs atomic.Int32 // Placement checks answered
	taken  atomic.Bool  // Placement shows an allocation
}

const wornNVMe hardware.Address = "0000:82:00.0"

func newRetireRig(t *testing.T, dev hardware.SimDevice, pipeline string) *retireRig {
	t.Helper()
	return newRetireRigWith(t, dev, pipeline, nil)
}

// newRetireRigWith is newRetireRig with the engine's backend wrap(s).
func newRetireRigWith(t *testing.T, dev hardware.SimDevice, pipeline string, wrap func(*sim.Simulator) hardware.Backend) *retireRig {
	t.Helper()
	dev.Address, dev.Kind, dev.PercentUsed = string(wornNVMe), hardware.KindNVMe, 95
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
		StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{dev}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
` + pipeline))
	if err != nil {
		t.Fatal(err)
	}
	r := &retireRig{s: s, reg: prometheus.NewRegistry()}
	var be hardware.Backend = s
	if wrap != nil {
		be = wrap(s)
	}
	r.e, err = New(cfg, Options{Backend: be, Checkpoints: NewMemCheckpoints(), Registerer: r.reg,
		Logger: slog.New(slog.DiscardHandler),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) {
			r.allocs.Add(1)
			return r.taken.Load(), nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *retireRig) clean(t *testing.T) *Result {
	t.Helper()
	res, err := r.e.Clean(context.Background(), Target{Address: wornNVMe, RPUUID: "rp-worn"})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// media reads the drive's first namespace (bound to nvme for the look,
// and back to the driver it was on).
func (r *retireRig) media(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	d, err := r.s.Discover(ctx, wornNVMe)
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "nvme" {
		if _, err := r.s.BindDriver(ctx, wornNVMe, "nvme"); err != nil {
			t.Fatal(err)
		}
		defer r.s.BindDriver(ctx, wornNVMe, d.Driver)
	}
	ms, err := r.s.Media(ctx, wornNVMe)
	if err != nil || len(ms) == 0 {
		t.Fatalf("media of %s: %v %v", wornNVMe, ms, err)
	}
	b, err := os.ReadFile(ms[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *retireRig) retirements(wiped string) float64 {
	return testutil.ToFloat64(r.e.m.retirements.WithLabelValues("nvme", wiped))
}

func (r *retireRig) driver(t *testing.T) string {
	t.Helper()
	d, err := r.s.Discover(context.Background(), wornNVMe)
	if err != nil {
		t.Fatal(err)
	}
	return d.Driver
}

// A worn drive is erased with the strongest technique its controller
// offers (sanitize crypto erase, of crypto, block and overwrite) before
// it is retired, on the driver the erase needs and back home after; the
// verdict is the wear gate's quarantine, the wipe is recorded as the
// run's retirement wipe, and the metric counts a wiped retirement.
func TestRetireWipesWornDriveWithStrongestTechnique(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{Driver: "vfio-pci", SANICAP: 0b111, FNA: 4}, `
      name: nvme
      steps:
        - {name: wear, type: nvme-wear-check, driver: nvme}
        - {name: erase, type: nvme-format, driver: nvme}
        - {name: verify, type: verify, driver: nvme}
`)
	if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Fatal("the simulated drive holds no tenant data to begin with")
	}
	res := r.clean(t)
	if res.Verdict != VerdictQuarantine || res.Step != "wear" {
		t.Fatalf("verdict %s at step %q (%s); want quarantine at the wear gate", res.Verdict, res.Step, res.Reason)
	}
	if got := states(res.Steps); got != "wear=failed retire-wipe=succeeded retire-readback=succeeded" {
		t.Errorf("steps %s; want the pipeline stopped at wear, then the retirement wipe and its read-back", got)
	}
	const crypto = "NVMe Sanitize, Crypto Erase"
	if rt := res.Retirement; rt == nil || !rt.Wiped || rt.Step != RetireWipeName || rt.Technique != crypto || rt.ReadBack != ReadBackPassed {
		t.Errorf("retirement %+v; want wiped by step %s with %q, read back", rt, RetireWipeName, crypto)
	}
	if !strings.Contains(res.Reason, "wiped before retirement by step retire-wipe ("+crypto+")") {
		t.Errorf("reason %q does not name the wipe and its technique", res.Reason)
	}
	wipe, rb := res.Steps[len(res.Steps)-2], res.Steps[len(res.Steps)-1]
	if rb.Details[RetireReadBackKey] != true || rb.Index != 4 || rb.Details[RetireWipeKey] != nil {
		t.Errorf("read-back record index %d details %v; want index 4 marked %s only", rb.Index, rb.Details, RetireReadBackKey)
	}
	if wipe.Details[RetireWipeKey] != true || wipe.Index != 3 {
		t.Errorf("wipe record index %d details %v; want index 3 (after the 3 planned steps) marked %s", wipe.Index, wipe.Details, RetireWipeKey)
	}
	if bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Error("the drive was retired with the tenant's data still on it")
	}
	if d := r.driver(t); d != "vfio-pci" {
		t.Errorf("retired drive left on %q, want its home driver vfio-pci", d)
	}
	// wear's bind to nvme, the wipe, and the read-back's bind to nvme:
	// Placement is asked before each.
	if n := r.allocs.Load(); n != 3 {
		t.Errorf("Placement asked %d times; want 3 (before the wear step's bind, the wipe and the read-back's bind)", n)
	}
	if w, u := r.retirements("true"), r.retirements("false"); w != 1 || u != 0 {
		t.Errorf("scour_pipeline_retirements_total wiped=true %v, wiped=false %v; want 1 and 0", w, u)
	}
}

// Review finding (L2): an optional step answering retire (code 13) was
// ignored, the run went on and the worn drive returned to the pool. A
// step saying retire is the device's own word that it must leave
// service, required or not: the run ends there, the drive is wiped and
// quarantined (docs/pipelines.md, Retirement; docs/plugins.md, codes).
func TestOptionalStepSayingRetireRetires(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{Driver: "vfio-pci", SANICAP: 0b111, FNA: 4}, `
      name: nvme
      steps:
        - {name: wear, type: nvme-wear-check, driver: nvme, required: false}
        - {name: erase, type: nvme-format, driver: nvme}
        - {name: verify, type: verify, driver: nvme}
`)
	res := r.clean(t)
	if res.Verdict != VerdictQuarantine || res.Step != "wear" || res.Code != plugins.CodeRetire || !strings.Contains(res.Reason, "device must be retired") {
		t.Fatalf("verdict %s at step %q code %d (%s); want quarantine at the optional wear step, code 13, saying retire", res.Verdict, res.Step, res.Code, res.Reason)
	}
	if got := states(res.Steps); got != "wear=failed retire-wipe=succeeded retire-readback=succeeded" {
		t.Errorf("steps %s; want the pipeline stopped at wear, then the retirement wipe and its read-back", got)
	}
	if rt := res.Retirement; rt == nil || !rt.Wiped {
		t.Errorf("retirement %+v; want the drive wiped before its retirement", rt)
	}
	if w := r.retirements("true"); w != 1 {
		t.Errorf("scour_pipeline_retirements_total wiped=true %v; want 1", w)
	}
}

// A retire_wipe configured on the pipeline is the wipe that runs.
func TestRetireWipeConfigured(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111}, `
      name: nvme
      retire_wipe: {name: shred, type: overwrite, args: {pattern: zero}}
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-sanitize}
`)
	res := r.clean(t)
	if rt := res.Retirement; res.Verdict != VerdictQuarantine || rt == nil || !rt.Wiped || rt.Step != "shred" {
		t.Fatalf("%s, retirement %+v; want quarantine wiped by step shred", res, rt)
	}
	if b := r.media(t); len(bytes.Trim(b, "\x00")) != 0 {
		t.Error("the configured overwrite did not zero the drive")
	}
}

// A drive whose erase fails is not retired at once while the run budget
// lasts (the next run wipes again); once it is spent, the drive is
// retired unwiped, and the verdict, the retirement and the metric say so
// plainly.
func TestRetireUnwipedWhenTheWipeFails(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111, Faults: map[string]string{"sanitize": sim.FaultFail}}, `
      name: nvme
      max_runs: 2
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-sanitize}
`)
	res := r.clean(t)
	if res.Verdict != VerdictRetryLater || res.Retirement != nil || !strings.Contains(res.Reason, "must be wiped") {
		t.Fatalf("first run: %s, retirement %+v; want retry-later saying the drive must be wiped first", res, res.Retirement)
	}
	res = r.clean(t)
	if res.Verdict != VerdictQuarantine || res.Step != "wear" {
		t.Fatalf("second run: %s; want quarantine at wear", res)
	}
	if rt := res.Retirement; rt == nil || rt.Wiped || rt.Why == "" {
		t.Errorf("retirement %+v; want unwiped, with why", rt)
	}
	if !strings.HasPrefix(res.Reason, "RETIRED UNWIPED: ") || !strings.Contains(res.Reason, "destroy it") {
		t.Errorf("reason %q does not say plainly that the drive is unwiped and must be destroyed", res.Reason)
	}
	if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Error("the tenant's data is gone, yet the record says unwiped")
	}
	if w, u := r.retirements("true"), r.retirements("false"); w != 0 || u != 1 {
		t.Errorf("scour_pipeline_retirements_total wiped=true %v, wiped=false %v; want 0 and 1", w, u)
	}
}

// Rule 2 holds for the retirement wipe: an allocation Placement shows
// before it aborts the run with the media untouched, and nothing is
// counted retired.
func TestRetireWipeAskedPlacementFirst(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111}, `
      name: nvme
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-sanitize}
`)
	r.taken.Store(true)
	res := r.clean(t)
	if res.Verdict != VerdictAborted || res.Retirement != nil {
		t.Fatalf("%s, retirement %+v; want aborted before the wipe, not retired", res, res.Retirement)
	}
	if r.allocs.Load() != 1 {
		t.Errorf("Placement asked %d times; want once, before the wipe", r.allocs.Load())
	}
	if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Error("the drive was wiped although Placement showed an allocation")
	}
	if w, u := r.retirements("true"), r.retirements("false"); w+u != 0 {
		t.Errorf("retirements counted %v/%v for an aborted run", w, u)
	}
}

// A retire_wipe that could not erase, or that the record could not tell
// from a pipeline step, is refused at config load.
func TestRetireWipeConfigChecked(t *testing.T) {
	for wipe, want := range map[string]string{
		`{type: verify}`:                          "a verifying step erases nothing",
		`{type: pci-reset}`:                       "type pci-reset erases nothing",
		`{name: wear, type: nvme-erase}`:          "name is also a step's",
		`{type: nvme-erase, destructive: false}`:  "a wipe is destructive",
		`{type: nvme-erase, args: {crypto: yes}}`: "retire_wipe (retire-wipe): args",
	} {
		_, err := ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme
      retire_wipe: ` + wipe + `
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-erase}
`))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("retire_wipe %s: %v; want an error saying %q", wipe, err, want)
		}
	}
}

func (r *retireRig) retire(t *testing.T, noWipe bool) *Result {
	t.Helper()
	res, err := r.e.Retire(context.Background(), Target{Address: wornNVMe, RPUUID: "rp-worn"}, "retired by alice: RMA", noWipe)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

const operatorPipeline = `
      name: nvme
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: erase, type: nvme-format}
`

// An operator's retirement (scourctl retire) of a device not cleaned
// since its last tenant runs the retirement wipe alone, not the
// pipeline: the strongest technique, Placement asked first, recorded as
// the run's retirement wipe, counted wiped; the verdict keeps it
// quarantined and says who retired it.
func TestOperatorRetireWipesFirst(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111}, operatorPipeline)
	res := r.retire(t, false)
	if res.Verdict != VerdictQuarantine || !strings.HasPrefix(res.Reason, "retired by alice: RMA; wiped before retirement") {
		t.Fatalf("%s; want quarantine, retired by alice, wiped first", res)
	}
	if got := states(res.Steps); got != "retire-wipe=succeeded retire-readback=succeeded" {
		t.Errorf("steps %s; want the retirement wipe alone, then its read-back", got)
	}
	const crypto = "NVMe Sanitize, Crypto Erase"
	if rt := res.Retirement; rt == nil || !rt.Wiped || rt.Technique != crypto {
		t.Errorf("retirement %+v; want wiped with %q", rt, crypto)
	}
	if w := res.Steps[0]; w.Index != 2 || w.Details[RetireWipeKey] != true {
		t.Errorf("wipe record index %d details %v; want index 2 marked %s", w.Index, w.Details, RetireWipeKey)
	}
	if bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Error("the drive was retired with the tenant's data still on it")
	}
	if n := r.allocs.Load(); n != 1 {
		t.Errorf("Placement asked %d times; want once, before the wipe", n)
	}
	if w, u := r.retirements("true"), r.retirements("false"); w != 1 || u != 0 {
		t.Errorf("scour_pipeline_retirements_total wiped=true %v, wiped=false %v; want 1 and 0", w, u)
	}
}

// Rule 2 for an operator's retirement: an allocation aborts it before
// the wipe, the media untouched, nothing counted.
func TestOperatorRetireWaitsForAnAllocation(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111}, operatorPipeline)
	r.taken.Store(true)
	res := r.retire(t, false)
	if res.Verdict != VerdictAborted || res.Retirement != nil {
		t.Fatalf("%s, retirement %+v; want aborted before the wipe", res, res.Retirement)
	}
	if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
		t.Error("the drive was wiped although Placement showed an allocation")
	}
	if w, u := r.retirements("true"), r.retirements("false"); w+u != 0 {
		t.Errorf("retirements counted %v/%v for an aborted run", w, u)
	}
}

// scourctl retire --no-wipe touches nothing, and records the device
// NOT WIPED by the operator's choice, counted unwiped (the alert).
func TestOperatorRetireNoWipe(t *testing.T) {
	r := newRetireRig(t, hardware.SimDevice{SANICAP: 0b111}, operatorPipeline)
	res := r.retire(t, true)
	if res.Verdict != VerdictQuarantine || !strings.HasPrefix(res.Reason, "RETIRED UNWIPED: retired by alice: RMA; "+NoWipeWhy) ||
		!strings.Contains(res.Reason, "destroy it") {
		t.Fatalf("%s; want quarantine, RETIRED UNWIPED by the operator's choice, destroy it", res)
	}
	if got := states(res.Steps); got != "retire-wipe=skipped" {
		t.Errorf("steps %s; want the retirement wipe recorded skipped", got)
	}
	if rt := res.Retirement; rt == nil || rt.Wiped || rt.Why != NoWipeWhy {
		t.Errorf("retirement %+v; want unwiped, %q", rt, NoWipeWhy)
	}
	if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) || r.allocs.Load() != 0 {
		t.Errorf("the drive was touched (Placement asked %d times) on --no-wipe", r.allocs.Load())
	}
	if w, u := r.retirements("true"), r.retirements("false"); w != 0 || u != 1 {
		t.Errorf("scour_pipeline_retirements_total wiped=true %v, wiped=false %v; want 0 and 1", w, u)
	}
}

// lyingSanitize is a drive whose sanitize reports success and erases
// nothing (a firmware bug, a controller that ignores the command).
type lyingSanitize struct{ *sim.Simulator }

func (lyingSanitize) Sanitize(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
	return nil
}

// A retirement wipe is believed only when its read-back finds what it
// promises: a sanitize that says it succeeded but left the tenant's data
// (zeros promised after a block erase; after a crypto erase, changed
// samples) retires the device NOT WIPED, counted and paged as unwiped.
func TestRetireReadBackCatchesWipeThatErasedNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sanicap int
	}{{"block erase", 0b010}, {"crypto erase", 0b001}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRetireRigWith(t, hardware.SimDevice{SANICAP: tc.sanicap}, operatorPipeline,
				func(s *sim.Simulator) hardware.Backend { return lyingSanitize{s} })
			res := r.clean(t)
			if got := states(res.Steps); got != "wear=failed retire-wipe=succeeded retire-readback=failed" {
				t.Fatalf("steps %s; want the wipe to succeed and its read-back to fail", got)
			}
			rt := res.Retirement
			if res.Verdict != VerdictQuarantine || rt == nil || rt.Wiped || !strings.Contains(rt.Why, "read-back (step retire-readback) failed") {
				t.Fatalf("verdict %s retirement %+v; want quarantine NOT wiped, naming the failed read-back", res.Verdict, rt)
			}
			if !strings.HasPrefix(res.Reason, "RETIRED UNWIPED: ") || !strings.Contains(res.Reason, "destroy it") {
				t.Errorf("reason %q; want RETIRED UNWIPED and the advice to destroy it", res.Reason)
			}
			if !bytes.Contains(r.media(t), []byte(sim.TenantPattern)) {
				t.Fatal("the lying drive was erased after all: the test proves nothing")
			}
			if w, u := r.retirements("true"), r.retirements("false"); w != 0 || u != 1 {
				t.Errorf("scour_pipeline_retirements_total wiped=true %v, wiped=false %v; want 0 and 1", w, u)
			}
		})
	}
}
