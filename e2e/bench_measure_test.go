package e2e

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// benchWait bounds each wait of a round: generous, since a loaded shared
// machine (load average 20-30 on 2 CPUs) makes the sample's serial
// rescans of a 64-device tree take over a minute.
const benchWait = 5 * time.Minute

// scourRound boots the scenario's instances on its scourd host (claims
// recorded), releases them and measures until every device is back.
func scourRound(t *testing.T, c *Cloud, sc *benchScenario) benchRun {
	h := sc.scour
	claims := strings.Count(h.Logs(), `msg="claim recorded"`)
	boot, boot5xx := scourCalls(t, h), scour5xx(t, h)
	insts := benchBoot(t, c, h.Node, sc, func(inst string) {
		c.Bus.PublishNotification(t, harness.Event{Type: "instance.create.end", InstanceUUID: inst, Host: h.Name, Node: h.Name,
			ProjectID: "tenant-a", UserID: "user-a"}, harness.Versioned)
	})
	Eventually(t, benchWait, "claims recorded", func() (bool, string) {
		return strings.Count(h.Logs(), `msg="claim recorded"`) >= claims+len(insts), tail(h.Logs(), 20)
	})
	// The wait reads only the round's own log: scanning the whole log
	// (megabytes by the last rounds) at every poll took CPU from the
	// round it measures, which the sample's wait (two counters) does not.
	off := h.LogLen()
	calls0, cpu0 := scourCalls(t, h), procCPU(t, h.cmd.Process.Pid)
	claimCalls := calls0 - boot
	p0 := benchProcs()
	m := startMachineCPU(t)
	t0 := benchRelease(t, c, h.Name, insts)
	Eventually(t, benchWait, "returns logged", func() (bool, string) {
		logs := h.LogsFrom(off)
		if strings.Count(logs, `msg="device cleaned and returned to the pool"`) >= sc.devices {
			return true, ""
		}
		return false, tail(logs, 20)
	})
	machine, busy := m.stop(t)
	if p0 != nil {
		printProcDiff("scourd "+sc.name, p0, readProcs(), sc.devices)
	}
	logs := h.LogsFrom(off)
	t1 := nthLogAfter(logs, `msg="device returned to the pool"`, t0, sc.devices)
	checkPool(t, c.P, h.Node, sc.tree)
	if os.Getenv("SCOUR_BENCH_TRACE") != "" && sc.devices == 8 {
		printTrace(sc.name, logs, t0)
	}
	calls, cpu := scourCalls(t, h)-calls0, procCPU(t, h.cmd.Process.Pid)-cpu0
	n := float64(sc.devices)
	return benchRun{wall: t1.Sub(t0), firstRun: firstLogAfter(logs, `msg="cleaning run started"`, t0).Sub(t0),
		firstClean: firstStamp(t, sc.scourStamps, t0).Sub(t0), claimCalls: claimCalls / n, http5xx: scour5xx(t, h) - boot5xx,
		calls: calls / n, cpu: time.Duration(float64(cpu) / n), machine: time.Duration(float64(machine) / n), busy: busy}
}

// baseRound does the same for the sample listener's host.
func baseRound(t *testing.T, c *Cloud, s *sampleListener, sc *benchScenario) benchRun {
	node := sc.baseNode
	insts := benchBoot(t, c, node, sc, func(string) {})
	s.started.Delete(node.Name)
	s.lastPut.Delete(node.Name)
	got, calls0, fails0 := s.got.Load(), s.calls.Load(), s.http5xx.Load()
	p0 := benchProcs()
	m := startMachineCPU(t)
	t0 := benchRelease(t, c, node.Name, insts)
	Eventually(t, benchWait, "baseline handled every delete", func() (bool, string) {
		return s.got.Load() >= got+int64(len(insts)) && s.busy.Load() == 0,
			fmt.Sprintf("%d of %d deletes received, %d being handled, %d cleanings or PUTs failed so far", s.got.Load()-got, len(insts), s.busy.Load(), s.errs.Load())
	})
	machine, busy := m.stop(t)
	if p0 != nil {
		printProcDiff("sample "+sc.name, p0, readProcs(), sc.devices)
	}
	checkPool(t, c.P, node, sc.tree)
	first, _ := s.started.Load(node.Name)
	last, _ := s.lastPut.Load(node.Name)
	return benchRun{wall: last.(time.Time).Sub(t0), firstRun: first.(time.Time).Sub(t0),
		firstClean: firstStamp(t, sc.baseStamps, t0).Sub(t0), http5xx: float64(s.http5xx.Load() - fails0),
		calls:   float64(s.calls.Load()-calls0) / float64(sc.devices),
		machine: time.Duration(float64(machine) / float64(sc.devices)), busy: busy}
}

func scourCalls(t *testing.T, h *Host) float64 {
	n, _ := aMetric(aMetrics(t, h), "scour_placement_requests_total")
	return n
}

// scour5xx is how many requests Placement answered with a 5xx, so far.
func scour5xx(t *testing.T, h *Host) float64 {
	n, _ := aMetric(aMetrics(t, h), "scour_placement_requests_total", `outcome="5`)
	return n
}

// firstStamp is the earliest CLEAN start benchPausePlugin stamped in path
// at or after t0 (t0 when none).
func firstStamp(t *testing.T, path string, t0 time.Time) time.Time {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("clean command stamps: %v", err)
	}
	first := time.Time{}
	for _, l := range strings.Fields(string(b)) {
		ns, err := strconv.ParseInt(l, 10, 64)
		if ts := time.Unix(0, ns); err == nil && !ts.Before(t0) && (first.IsZero() || ts.Before(first)) {
			first = ts
		}
	}
	if first.IsZero() {
		return t0
	}
	return first
}

// procCPU is the process's user+system CPU time (/proc/<pid>/stat, clock
// ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := parseProcStat(b)
	if !ok {
		t.Fatalf("/proc/%d/stat: cannot parse %q", pid, b)
	}
	return st.own
}

// machineCPU measures the CPU time all processes on the machine use
// between start and stop (/proc/stat, clock ticks of 10 ms): the bench's
// two sides share the machine's CPUs with Placement, its database and the
// broker, and this says how much of them a round took.
type machineCPU struct {
	busy0 time.Duration
	t0    time.Time
}

func startMachineCPU(t *testing.T) machineCPU {
	return machineCPU{busy0: machineBusy(t), t0: time.Now()}
}

// stop returns the CPU time used since start and its share of the
// machine's CPUs over that time.
func (m machineCPU) stop(t *testing.T) (time.Duration, float64) {
	used, wall := machineBusy(t)-m.busy0, time.Since(m.t0)
	return used, float64(used) / float64(wall) / float64(runtime.NumCPU())
}

// machineBusy is the machine's non-idle CPU time so far: user, nice,
// system, irq, softirq and steal of /proc/stat's cpu line.
func machineBusy(t *testing.T) time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	busy := 0
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.Atoi(f[i])
		if err != nil {
			t.Fatalf("/proc/stat field %d of %q: %v", i, line, err)
		}
		busy += v
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// firstLogAfter is the time of the first log line holding msg at or after t0.
func firstLogAfter(logs, msg string, t0 time.Time) time.Time {
	for _, l := range strings.Split(logs, "\n") {
		if ts, ok := logTime(l, t0); ok && strings.Contains(l, msg) {
			return ts
		}
	}
	return t0
}

// nthLogAfter is the time of the n-th log line holding msg at or after
// t0 (t0 when there are fewer).
func nthLogAfter(logs, msg string, t0 time.Time, n int) time.Time {
	for _, l := range strings.Split(logs, "\n") {
		if ts, ok := logTime(l, t0); ok && strings.Contains(l, msg) {
			if n--; n == 0 {
				return ts
			}
		}
	}
	return t0
}

// logTime is the time of a scourd text log line, if it is at or after t0
// (scourd logs milliseconds).
func logTime(l string, t0 time.Time) (time.Time, bool) {
	if !strings.HasPrefix(l, "time=") {
		return time.Time{}, false
	}
	v, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
	ts, err := time.Parse(time.RFC3339Nano, v)
	return ts, err == nil && !ts.Before(t0.Truncate(time.Millisecond))
}

// printTrace prints scourd's log lines from t0 on, each with its offset
// from t0 (SCOUR_BENCH_TRACE=1: where a round's time goes).
func printTrace(name, logs string, t0 time.Time) {
	fmt.Printf("TRACE %s, publish at %s\n", name, t0.UTC().Format(time.RFC3339Nano))
	for _, l := range strings.Split(logs, "\n") {
		if ts, ok := logTime(l, t0); ok {
			fmt.Printf("TRACE %+7.1fms %s\n", float64(ts.Sub(t0))/1e6, l)
		}
	}
}

func median[T int64 | float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func pick[T any](runs []benchRun, f func(benchRun) T) []T {
	var out []T
	for _, r := range runs {
		out = append(out, f(r))
	}
	return out
}

func report(scenarios []benchScenario, rounds int, placement string) {
	host, _ := os.Hostname()
	cpus, _ := os.ReadFile("/proc/cpuinfo")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nbench-lifecycle: medians of %d alternating rounds; host %s, %d CPUs, load average %s; real RabbitMQ and Placement (e2e containers: %s)\n",
		rounds, host, strings.Count(string(cpus), "processor\t:"), strings.Join(strings.Fields(string(load))[:3], " "), placement)
	fmt.Printf("%-34s %10s %10s %7s | %10s %10s | %10s %10s | %9s %9s | %9s | %5s %6s | %11s | %11s %11s | %5s %6s\n", "scenario", "scourd", "sample", "ratio",
		"run start", "sample", "1st clean", "sample", "calls/dev", "sample", "claim/dev", "5xx", "sample", "scourd CPU", "machine CPU", "sample", "busy", "sample")
	dur := func(runs []benchRun, f func(benchRun) time.Duration) time.Duration {
		return median(pick(runs, f)).Round(time.Millisecond)
	}
	num := func(runs []benchRun, f func(benchRun) float64) float64 { return median(pick(runs, f)) }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, sc := range scenarios {
		sw, bw := dur(sc.scourRuns, func(r benchRun) time.Duration { return r.wall }), dur(sc.baseRuns, func(r benchRun) time.Duration { return r.wall })
		total5xx := func(runs []benchRun) (n float64) {
			for _, r := range runs {
				n += r.http5xx
			}
			return n
		}
		fmt.Printf("%-34s %10s %10s %6.1fx | %10s %10s | %10s %10s | %9.2f %9.2f | %9.2f | %5.0f %6.0f | %8.1f ms | %8.1f ms %8.1f ms | %4.0f%% %5.0f%%\n", sc.name,
			sw, bw, float64(bw)/float64(sw),
			dur(sc.scourRuns, func(r benchRun) time.Duration { return r.firstRun }), dur(sc.baseRuns, func(r benchRun) time.Duration { return r.firstRun }),
			dur(sc.scourRuns, func(r benchRun) time.Duration { return r.firstClean }), dur(sc.baseRuns, func(r benchRun) time.Duration { return r.firstClean }),
			num(sc.scourRuns, func(r benchRun) float64 { return r.calls }), num(sc.baseRuns, func(r benchRun) float64 { return r.calls }),
			num(sc.scourRuns, func(r benchRun) float64 { return r.claimCalls }),
			total5xx(sc.scourRuns), total5xx(sc.baseRuns),
			ms(median(pick(sc.scourRuns, func(r benchRun) time.Duration { return r.cpu }))),
			ms(median(pick(sc.scourRuns, func(r benchRun) time.Duration { return r.machine }))),
			ms(median(pick(sc.baseRuns, func(r benchRun) time.Duration { return r.machine }))),
			100*num(sc.scourRuns, func(r benchRun) float64 { return r.busy }), 100*num(sc.baseRuns, func(r benchRun) float64 { return r.busy }))
	}
	fmt.Println("columns: publish-to-pool wall time (scourd, sample, sample/scourd); publish to first cleaning run started (scourd's log; the sample's command start);")
	fmt.Println("  publish to the first clean command's start (the plugin's own clock, both sides); Placement calls per cleaned device at the release; scourd's Placement calls")
	fmt.Println("  per device at create.end (the sample makes none); Placement 5xx answers over all rounds (scourd's requests, the sample's); scourd CPU per cleaning;")
	fmt.Println("  CPU time of every process on the machine per cleaned device (scourd's round, the sample's); the machine's CPUs busy during the round (scourd's, the sample's)")
}
