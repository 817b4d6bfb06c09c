package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/plugins"
)

// Regression tests for what a real passthrough host (and QEMU's emulated
// NVMe, docs/e2e.md) showed: devices live on vfio-pci, QEMU emulates no
// Sanitize (sanicap 0, fna 0, oacs 0x10a) and reports a synthetic SMART
// log (available spare 0, threshold 0).

func intp(n int) *int { return &n }

// qemuNVMe is a simulated drive with QEMU 7.2's answers, bound to vfio-pci.
func qemuNVMe(addr, serial string, namespaces int) hardware.SimDevice {
	return hardware.SimDevice{Address: addr, Kind: hardware.KindNVMe, Driver: "vfio-pci", Serial: serial, Model: "QEMU NVMe Ctrl",
		Namespaces: namespaces, MediaBytes: 1 << 20, OACS: intp(0x10a), AvailSpare: intp(0), SpareThresh: intp(0)}
}

func simEngine(t *testing.T, cfg Config, devs ...hardware.SimDevice) (*Engine, *sim.Simulator, *countingAllocations) {
	t.Helper()
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
		StateDir: t.TempDir(), Step: time.Millisecond, Devices: devs}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	alloc := &countingAllocations{}
	e, err := New(cfg, Options{Backend: s, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Allocations: alloc})
	if err != nil {
		t.Fatal(err)
	}
	return e, s, alloc
}

type countingAllocations struct {
	mu        sync.Mutex
	calls     int
	allocated bool
	// slow, when set, is how long answer number call (from 1) takes.
	slow func(call int) time.Duration
}

func (c *countingAllocations) HasAllocations(context.Context, string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.slow != nil {
		time.Sleep(c.slow(c.calls))
	}
	return c.allocated, nil
}

// simMedia reads every namespace of addr (binding nvme to look, and back).
func simMedia(t *testing.T, s *sim.Simulator, addr hardware.Address) []byte {
	t.Helper()
	ctx := context.Background()
	prev, err := s.BindDriver(ctx, addr, "nvme")
	if err != nil {
		t.Fatal(err)
	}
	defer s.BindDriver(ctx, addr, prev)
	ms, err := s.Media(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, m := range ms {
		b, err := os.ReadFile(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func simTarget(addr string) Target {
	return Target{Address: hardware.Address(addr), RPUUID: "rp-" + addr, ResourceClass: "CUSTOM_NVME"}
}

func stepNamed(t *testing.T, res *Result, name string) StepRecord {
	t.Helper()
	for _, r := range res.Steps {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no step %s in %s", name, states(res.Steps))
	return StepRecord{}
}

// TestRequirementsSeeTheStepDriver: a vfio-bound drive whose sanicap is
// 0b111 meets `requires: {nvme.sanitize: ">=block"}` on a `driver: nvme`
// step: requirements are evaluated on the device as bound for the step,
// not as it sat on vfio-pci (where every NVMe capability is absent).
func TestRequirementsSeeTheStepDriver(t *testing.T) {
	cfg := nvmeSteps(t, `
        - {name: sanitize, type: nvme-sanitize, driver: nvme, requires: {nvme.sanitize: ">=block"}, args: {poll: 10ms}}
        - {name: verify, type: verify, driver: nvme}`)
	good := qemuNVMe("0000:81:00.0", "S1", 1)
	good.SANICAP = 0b111
	e, s, alloc := simEngine(t, cfg, good, qemuNVMe("0000:82:00.0", "S2", 1))
	ctx := context.Background()

	res, err := e.Clean(ctx, simTarget("0000:81:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictClean {
		t.Fatalf("verdict %s (%s): %s", res.Verdict, res.Reason, states(res.Steps))
	}
	if e, ok := lastErasureOf(res); !ok || e != "sanitize-crypto" {
		t.Fatalf("technique %q", e)
	}
	// Verify after a crypto erase checks that the blocks sampled before
	// it changed.
	v := stepNamed(t, res, "verify")
	if vr := verificationIn(v); v.State != StepSucceeded || vr["result"] != plugins.VerifyPassed || !strings.Contains(fmt.Sprint(vr["method"]), "sampled before the sanitize-crypto") {
		t.Fatalf("verify after crypto erase: %s %q %v", v.State, v.Message, vr)
	}
	if bytes.Contains(simMedia(t, s, "0000:81:00.0"), []byte(sim.TenantPattern)) {
		t.Fatal("tenant data left after sanitize")
	}
	if d, _ := s.Discover(ctx, "0000:81:00.0"); d.Driver != "vfio-pci" {
		t.Fatalf("device left on %s", d.Driver)
	}
	if alloc.calls == 0 {
		t.Fatal("Placement was not asked before binding the device away from vfio-pci")
	}

	// sanicap 0 still fails the requirement, now named as seen on nvme.
	res, err = e.Clean(ctx, simTarget("0000:82:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictQuarantine || !strings.Contains(res.Reason, "bound to nvme") {
		t.Fatalf("sanicap 0: verdict %s (%s)", res.Verdict, res.Reason)
	}
	if !bytes.Contains(simMedia(t, s, "0000:82:00.0"), []byte(sim.TenantPattern)) {
		t.Fatal("an unsupported device was wiped")
	}
}

// TestBindWaitsForPlacement: taking a device off vfio-pci is as
// disruptive to an instance as a destructive step, so even a read-only
// step with a driver is preceded by the allocation check.
func TestBindWaitsForPlacement(t *testing.T) {
	cfg := nvmeSteps(t, `
        - {name: wear, type: nvme-wear-check, driver: nvme}
        - {name: erase, type: nvme-erase, driver: nvme}`)
	e, s, alloc := simEngine(t, cfg, qemuNVMe("0000:81:00.0", "S1", 1))
	alloc.allocated = true
	res, err := e.Clean(context.Background(), simTarget("0000:81:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictAborted {
		t.Fatalf("verdict %s (%s)", res.Verdict, res.Reason)
	}
	if d, _ := s.Discover(context.Background(), "0000:81:00.0"); d.Driver != "vfio-pci" {
		t.Fatalf("an allocated device was bound to %s", d.Driver)
	}
}

// nvmeSteps is a config with one NVMe profile whose pipeline has steps
// (YAML list items indented by 8).
func nvmeSteps(t *testing.T, steps string) Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme
      steps:` + steps + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func lastErasureOf(res *Result) (string, bool) {
	e := lastErasure(res.Steps)
	if e == nil {
		return "", false
	}
	return e.ID, true
}

func verificationIn(rec StepRecord) map[string]any {
	v, _ := rec.Details[plugins.VerificationKey].(map[string]any)
	return v
}

// shippedPipelines is the pipelines section of deploy/scour.yaml.
func shippedPipelines(t *testing.T) Config {
	t.Helper()
	b, err := os.ReadFile("../deploy/scour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pipelines yaml.Node `yaml:"pipelines"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(&doc.Pipelines)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PluginDirs = nil // no plugin steps ship; the directory need not exist here
	return cfg
}

// TestShippedPipelineOnQEMUDrives: deploy/scour.yaml cleans every healthy
// QEMU-like drive (vfio-bound at the start, no Sanitize: Format NVM, then
// a read-back of zeros) and quarantines the one with a SMART critical
// warning, wiped first (the strongest erase it offers: Format NVM) so it
// leaves for an RMA or disposal without the tenant's data.
func TestShippedPipelineOnQEMUDrives(t *testing.T) {
	warn := qemuNVMe("0000:04:00.0", "CRIT", 1)
	warn.CriticalWarning = 1
	e, s, _ := simEngine(t, shippedPipelines(t),
		qemuNVMe("0000:01:00.0", "A", 1), qemuNVMe("0000:02:00.0", "B", 2), qemuNVMe("0000:03:00.0", "C", 1), warn)
	ctx := context.Background()
	for addr, serial := range map[string]string{"0000:01:00.0": "A", "0000:02:00.0": "B", "0000:03:00.0": "C"} {
		res, err := e.Clean(ctx, simTarget(addr))
		if err != nil {
			t.Fatal(err)
		}
		// Bound to vfio-pci the drive shows no serial; the wear step's
		// bind to nvme reveals it for the record.
		if res.Serial != serial || res.Model != "QEMU NVMe Ctrl" {
			t.Fatalf("%s: serial %q model %q, want %q", addr, res.Serial, res.Model, serial)
		}
		if res.Verdict != VerdictClean {
			t.Fatalf("%s: verdict %s (%s): %s", addr, res.Verdict, res.Reason, states(res.Steps))
		}
		if tech, _ := lastErasureOf(res); tech != "format-ses1" {
			t.Fatalf("%s: technique %q, want format-ses1", addr, tech)
		}
		vr := verificationIn(stepNamed(t, res, "verify"))
		if vr["result"] != plugins.VerifyPassed || !strings.Contains(fmt.Sprint(vr["expected"]), "0x00") || vr["bytes_read"] == int64(0) {
			t.Fatalf("%s: verification %v", addr, vr)
		}
		if len(bytes.Trim(simMedia(t, s, hardware.Address(addr)), "\x00")) != 0 {
			t.Fatalf("%s: media not zero after a clean verdict", addr)
		}
	}
	res, err := e.Clean(ctx, simTarget("0000:04:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictQuarantine || res.Step != "wear" || !strings.Contains(res.Reason, "critical_warning") || res.Serial != "CRIT" {
		t.Fatalf("critical warning drive: verdict %s at %s (%s)", res.Verdict, res.Step, res.Reason)
	}
	if rt := res.Retirement; rt == nil || !rt.Wiped || !strings.Contains(rt.Technique, "Format NVM") {
		t.Errorf("critical warning drive: retirement %+v, want wiped by Format NVM", rt)
	}
	if b := simMedia(t, s, "0000:04:00.0"); bytes.Contains(b, []byte(sim.TenantPattern)) {
		t.Fatal("the retired drive still holds the tenant's data")
	}
	if d, err := s.Discover(ctx, "0000:04:00.0"); err != nil || d.Driver != "vfio-pci" {
		t.Errorf("retired drive on %v (%v), want vfio-pci", d, err)
	}
}

// sanitizableConfig is one profile that requires block sanitize, which a
// vfio-bound drive shows only once looked at on nvme.
func sanitizableConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: sanitizable
    match: {kinds: [nvme], requires: {nvme.sanitize: ">=block"}}
    pipeline:
      name: nvme
      steps:
        - {name: erase, type: nvme-sanitize, driver: nvme, args: {poll: 10ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The look at a vfio-bound drive's capabilities binds it to nvme only on
// an all-clear that came less than placementAnswerMaxAge after it was
// asked for: a slow answer is asked again, and after maxClearAsks more
// slow ones the drive is not bound at all.
func TestLookAskedAgainOnASlowAnswer(t *testing.T) {
	cfg := sanitizableConfig(t)
	for _, tc := range []struct {
		name   string
		slow   int // answers that take 600 ms (the bound is 200 ms)
		looked bool
	}{
		{name: "the first answer is slow", slow: 1, looked: true},
		{name: "every answer is slow", slow: 1 + maxClearAsks, looked: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := qemuNVMe("0000:81:00.0", "S1", 1)
			good.SANICAP = 0b010
			e, s, alloc := simEngine(t, cfg, good)
			e.placementAnswerMaxAge = 200 * time.Millisecond
			alloc.slow = func(call int) time.Duration {
				if call <= tc.slow {
					return 600 * time.Millisecond
				}
				return 0
			}
			ctx := context.Background()
			res, err := e.Clean(ctx, simTarget("0000:81:00.0"))
			if err != nil {
				t.Fatal(err)
			}
			d, _ := s.Discover(ctx, "0000:81:00.0")
			if looked := d.Serial != ""; looked != tc.looked {
				t.Fatalf("drive bound to nvme to look: %v, want %v (%s: %s)", looked, tc.looked, res.Verdict, res.Reason)
			}
			if !tc.looked && (res.Verdict != VerdictNoProfile || !strings.Contains(res.Reason, "too slow")) {
				t.Fatalf("every answer slow: %s (%s), want no-profile naming the slow answers", res.Verdict, res.Reason)
			}
			if alloc.calls < 1+min(tc.slow, maxClearAsks) {
				t.Fatalf("Placement asked %d times, want at least %d", alloc.calls, 1+min(tc.slow, maxClearAsks))
			}
		})
	}
}

// TestProfileRequirementsReadOnNVMe: a profile that requires an NVMe
// capability matches a vfio-bound drive that has it: the engine binds the
// drive to nvme for a moment (after asking Placement) to read it, where
// before the drive was never cleaned (no-profile). An allocated drive is
// not touched.
func TestProfileRequirementsReadOnNVMe(t *testing.T) {
	cfg := sanitizableConfig(t)
	good := qemuNVMe("0000:81:00.0", "S1", 1)
	good.SANICAP = 0b010
	e, s, alloc := simEngine(t, cfg, good, qemuNVMe("0000:82:00.0", "S2", 1))
	ctx := context.Background()
	p, _ := planText(t, e, "0000:81:00.0")
	if p.Profile != "" || !strings.Contains(strings.Join(p.NotMatched, "\n"), "binds the device to nvme for a moment") {
		t.Fatalf("dry run before any look: profile %q, %q", p.Profile, p.NotMatched)
	}

	alloc.allocated = true
	res, err := e.Clean(ctx, simTarget("0000:81:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictNoProfile || !strings.Contains(res.Reason, "Placement no longer shows it dirty") {
		t.Fatalf("allocated: %s (%s)", res.Verdict, res.Reason)
	}
	if d, _ := s.Discover(ctx, "0000:81:00.0"); d.Serial != "" {
		t.Fatal("an allocated drive was bound to nvme")
	}

	alloc.allocated = false
	res, err = e.Clean(ctx, simTarget("0000:81:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictClean || res.Profile != "sanitizable" {
		t.Fatalf("sanicap 0b010 on vfio-pci: %s (%s)", res.Verdict, res.Reason)
	}
	if d, _ := s.Discover(ctx, "0000:81:00.0"); d.Driver != "vfio-pci" {
		t.Fatalf("left on %s", d.Driver)
	}
	// sanicap 0: looked at, still not matched, back on vfio-pci.
	res, err = e.Clean(ctx, simTarget("0000:82:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Discover(ctx, "0000:82:00.0"); res.Verdict != VerdictNoProfile || d.Driver != "vfio-pci" || d.Serial != "S2" {
		t.Fatalf("sanicap 0: %s (%s), driver %s serial %q", res.Verdict, res.Reason, d.Driver, d.Serial)
	}
}

// bindCounter counts driver binds and remembers the driver each reset
// found the device on.
type bindCounter struct {
	*sim.Simulator
	mu       sync.Mutex
	binds    []string
	resetsOn []string
}

func (b *bindCounter) BindDriver(ctx context.Context, a hardware.Address, drv string) (string, error) {
	b.mu.Lock()
	b.binds = append(b.binds, drv)
	b.mu.Unlock()
	return b.Simulator.BindDriver(ctx, a, drv)
}

func (b *bindCounter) ResetFunction(ctx context.Context, a hardware.Address) error {
	d, _ := b.Simulator.Discover(ctx, a)
	b.mu.Lock()
	b.resetsOn = append(b.resetsOn, d.Driver)
	b.mu.Unlock()
	return b.Simulator.ResetFunction(ctx, a)
}

// TestConsecutiveDriverStepsBindOnce: wear, erase and verify all want
// nvme; the drive is bound once and back once (each bind costs a driver
// probe), and a step without a driver (reset) still runs on the home
// driver, also when the step between was skipped.
func TestConsecutiveDriverStepsBindOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sanicap int
		verify  StepState
	}{{"format, verify runs", 0, StepSucceeded}, {"crypto sanitize, verify of sampled blocks", 0b001, StepSucceeded}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := qemuNVMe("0000:01:00.0", "A", 1)
			dev.SANICAP = tc.sanicap
			s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
				StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{dev}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			be := &bindCounter{Simulator: s}
			e, err := New(shippedPipelines(t), Options{Backend: be, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
				Logger: slog.New(slog.DiscardHandler), Allocations: &countingAllocations{}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.Clean(context.Background(), simTarget("0000:01:00.0"))
			if err != nil || res.Verdict != VerdictClean {
				t.Fatalf("%v, %v", res, err)
			}
			if v := stepNamed(t, res, "verify"); v.State != tc.verify {
				t.Fatalf("verify %s", v.State)
			}
			if strings.Join(be.binds, ",") != "nvme,vfio-pci" {
				t.Fatalf("binds %v, want nvme then vfio-pci once", be.binds)
			}
			if strings.Join(be.resetsOn, ",") != "vfio-pci" {
				t.Fatalf("reset ran on %v, want vfio-pci", be.resetsOn)
			}
			if d, _ := s.Discover(context.Background(), "0000:01:00.0"); d.Driver != "vfio-pci" {
				t.Fatalf("left on %s", d.Driver)
			}
		})
	}
}

// TestKeptDriverReleasedWhenRunEnds: a drive kept on nvme after the wear
// step goes back to vfio-pci when the next step ends the run, failing in
// its run or refused before it (requirements unmet).
func TestKeptDriverReleasedWhenRunEnds(t *testing.T) {
	for _, erase := range []string{
		`{name: erase, type: nvme-erase, driver: nvme}`,
		`{name: erase, type: nvme-erase, driver: nvme, requires: {nvme.sanitize: ">=crypto"}}`,
	} {
		cfg := nvmeSteps(t, `
        - {name: wear, type: nvme-wear-check, driver: nvme}
        - `+erase+`
        - {name: verify, type: verify, driver: nvme}`)
		dev := qemuNVMe("0000:01:00.0", "A", 1)
		dev.Faults = map[string]string{"format": "fail"}
		e, s, _ := simEngine(t, cfg, dev)
		keptDriverReleased(t, e, s)
	}
}

func keptDriverReleased(t *testing.T, e *Engine, s *sim.Simulator) {
	t.Helper()
	res, err := e.Clean(context.Background(), simTarget("0000:01:00.0"))
	if err != nil || res.Verdict == VerdictClean || res.Step != "erase" {
		t.Fatalf("%+v, %v", res, err)
	}
	if d, _ := s.Discover(context.Background(), "0000:01:00.0"); d.Driver != "vfio-pci" {
		t.Fatalf("left on %s after a failed run", d.Driver)
	}
}
