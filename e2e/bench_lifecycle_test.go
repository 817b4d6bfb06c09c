package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// TestBenchLifecycle is `make bench-lifecycle` (docs/operations.md#release-to-pool):
// scourd on simulated hardware against Nova's sample listener
// (bench_baseline_test.go), same broker, same Placement, same plugin step,
// alternating round by round. It measures and prints; it asserts nothing
// about time (speed is never a test verdict here).
func TestBenchLifecycle(t *testing.T) {
	if os.Getenv("SCOUR_BENCH_LIFECYCLE") == "" {
		t.Skip("a benchmark, not a test: run it with make bench-lifecycle (sets SCOUR_BENCH_LIFECYCLE=1)")
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("SCOUR_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	c := NewCloud(t)
	plugin := benchPlugin(t)
	base := &sampleListener{p: c.P, cleaner: plugin, seconds: map[string]string{}, stamps: map[string]string{}}
	stamps := t.TempDir()
	if err := os.Chmod(stamps, 0o777); err != nil { // the plugin appends there, as whichever user runs it
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scenarios := []benchScenario{
		{name: "8 devices, no-op clean", tree: 16, devices: 8, seconds: 0},
		{name: "64 devices at once, no-op clean", tree: 64, devices: 64, seconds: 0},
		{name: "8 devices x 1 s clean", tree: 16, devices: 8, seconds: 1},
	}
	if only := os.Getenv("SCOUR_BENCH_SCENARIOS"); only != "" { // e.g. "^8 devices, no-op"
		re := regexp.MustCompile(only)
		scenarios = slices.DeleteFunc(scenarios, func(sc benchScenario) bool { return !re.MatchString(sc.name) })
	}
	for i := range scenarios {
		sc := &scenarios[i]
		sc.scourStamps = filepath.Join(stamps, fmt.Sprintf("scourd-%d", i))
		sc.baseStamps = filepath.Join(stamps, fmt.Sprintf("sample-%d", i))
		sc.scour = c.AddHost(t, benchDevices(sc.tree), WithReconcileInterval(time.Hour), withBenchPipeline(plugin, sc.seconds, sc.scourStamps, c.P.BackendURL()))
		sc.baseNode = c.P.SeedComputeNode(t, harness.UniqueName("smp"), benchSeed(sc.tree)...)
		base.seconds[sc.baseNode.Name] = strconv.Itoa(sc.seconds)
		base.stamps[sc.baseNode.Name] = sc.baseStamps
	}
	base.run(ctx, t, c.Bus.URL())
	for r := range rounds {
		for i := range scenarios {
			sc := &scenarios[i]
			if r%2 == 0 {
				sc.scourRuns = append(sc.scourRuns, scourRound(t, c, sc))
				sc.baseRuns = append(sc.baseRuns, baseRound(t, c, base, sc))
			} else {
				sc.baseRuns = append(sc.baseRuns, baseRound(t, c, base, sc))
				sc.scourRuns = append(sc.scourRuns, scourRound(t, c, sc))
			}
		}
	}
	if n := base.errs.Load(); n > 0 {
		t.Logf("baseline: %d cleanings or PUTs failed (logged and forgotten, as the sample does)", n)
	}
	report(scenarios, rounds, c.P.Mode().String())
}

type benchScenario struct {
	name                   string
	tree, devices, seconds int
	scour                  *Host
	baseNode               *harness.ComputeNode
	scourRuns, baseRuns    []benchRun
	// scourStamps and baseStamps are the files each side's plugin
	// appends the start of every CLEAN to (benchPausePlugin).
	scourStamps, baseStamps string
}

type benchRun struct {
	wall, firstRun time.Duration
	// firstClean is publish to the start of the first clean command (the
	// plugin's own clock), where firstRun is scourd's "cleaning run
	// started" line (the sample starts its command at once).
	firstClean time.Duration
	calls      float64 // Placement calls per cleaned device, at the release
	// claimCalls is scourd's Placement calls per device while it handled
	// the instances' create.end (the sample makes none), and http5xx the
	// 5xx answers Placement gave the side during the round (claim and
	// release; the sample's failed PUTs).
	claimCalls float64
	http5xx    float64
	cpu        time.Duration
	// machine is the CPU time every process on the machine used during
	// the round (scourd or the sample, its plugin processes, Placement,
	// its database, RabbitMQ, the harness), per cleaned device; busy is
	// that time over the round's wall time and all CPUs.
	machine time.Duration
	busy    float64
}

func benchDevices(n int) []SimDevice {
	devs := make([]SimDevice, n)
	for i := range devs {
		devs[i] = SimDevice{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i)}
	}
	return devs
}

func benchSeed(n int) []harness.Device {
	var out []harness.Device
	for _, d := range benchDevices(n) {
		out = append(out, harness.Device{Address: d.Address, VendorID: "144d", ProductID: "a80a", OneTimeUse: true})
	}
	return out
}

// benchPlugin installs the pause plugin (sleeps SCOUR_ARG_SECONDS) in a
// root-owned directory, as scour's plugin rules want.
func benchPlugin(t *testing.T) string {
	dir := t.TempDir()
	path := filepath.Join(dir, "pause")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(benchPausePlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// benchPausePlugin is pausePlugin that first appends the time its CLEAN
// started (ns since the epoch) to SCOUR_ARG_STAMPS: both sides run it, so
// "first clean command" is measured by the same clock for both.
var benchPausePlugin = strings.Replace(pausePlugin, "if [ \"$SCOUR_COMMAND\" = CLEAN ]; then\n",
	"if [ \"$SCOUR_COMMAND\" = CLEAN ]; then\n\t[ -n \"${SCOUR_ARG_STAMPS:-}\" ] && date +%s%N >>\"$SCOUR_ARG_STAMPS\"\n", 1)

// withBenchPipeline makes the NVMe pipeline one destructive plugin step
// that sleeps seconds (0: a no-op process) and stamps its start in stamps. A sleep loads no host
// resource, so the step says in_device, as a plugin that issues a device
// command and waits would; run limits are scourd's defaults. scourd talks
// to Placement itself (placement), as the baseline does, not through the
// harness's fault proxy: the proxy runs in the harness's process and took
// CPU from scourd's rounds only.
func withBenchPipeline(plugin string, seconds int, stamps, placement string) HostOption {
	return func(cfg map[string]any) {
		cfg["log"].(map[string]any)["level"] = "info" // production's level
		cfg["placement"].(map[string]any)["endpoint"] = placement
		pl := cfg["pipelines"].(map[string]any)
		delete(pl, "max_concurrent")
		pl["plugin_dirs"] = []string{filepath.Dir(plugin)}
		pl["profiles"] = []map[string]any{{
			"name": "nvme", "match": map[string]any{"kinds": []string{"nvme"}},
			"pipeline": map[string]any{"name": "bench", "version": 1, "steps": []map[string]any{{
				"name": "pause", "type": "plugin", "path": plugin, "destructive": true, "in_device": true,
				"args": map[string]any{"seconds": seconds, "stamps": stamps},
			}}},
		}}
	}
}

// instances boots sc.devices devices as instances of 8 devices each.
func benchBoot(t *testing.T, c *Cloud, node *harness.ComputeNode, sc *benchScenario, notify func(inst string)) []string {
	var insts []string
	for i := 0; i < sc.devices; i += 8 {
		inst := harness.NewUUID()
		devs := node.Devices[i:min(i+8, sc.devices)]
		c.P.AllocateInstance(t, inst, "tenant-a", "user-a", node, devs...)
		for _, d := range devs {
			c.P.Burn(t, d)
		}
		notify(inst)
		insts = append(insts, inst)
	}
	return insts
}

// release deletes every instance's allocations, then publishes every
// delete.end at once; it returns when the first was published.
func benchRelease(t *testing.T, c *Cloud, host string, insts []string) time.Time {
	for _, inst := range insts {
		c.P.DeleteAllocations(t, inst)
	}
	t0 := time.Now()
	for _, inst := range insts {
		c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: host, Node: host}, harness.Versioned)
	}
	return t0
}

// checkPool makes sure, with one call after the round was timed, that n
// devices of node have capacity again. The round's end is each side's own
// record of its last successful un-reserve PUT (scourd's log line, the
// baseline's clock), not a poll: when the e2e Placement served one
// request at a time, a poll every few milliseconds took about half of it
// from whichever side was measured, and delayed a serial client (the
// baseline) more than one with requests queued (scourd); with several
// workers a poll still takes CPU from the round it measures.
func checkPool(t *testing.T, p *harness.Placement, node *harness.ComputeNode, n int) {
	poll := &sampleListener{p: p}
	q := "/resource_providers?in_tree=" + node.UUID + "&resources=" + node.Devices[0].ResourceClass + ":1"
	var out struct {
		RPs []struct{} `json:"resource_providers"`
	}
	if err := poll.get(context.Background(), q, &out); err != nil || len(out.RPs) < n {
		t.Fatalf("%d of %d devices of %s back in the pool after every un-reserve was recorded (%v)", len(out.RPs), n, node.Name, err)
	}
}
