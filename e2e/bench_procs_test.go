package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SCOUR_BENCH_PROCS=1 make bench-lifecycle prints, after each round, the
// CPU time each kind of process on the machine used per cleaned device:
// where the machine CPU column's time went (Placement's uwsgi workers,
// PostgreSQL, RabbitMQ, scourd with its reaped plugin processes, kernel
// workers, the harness).

// procStat is one process's /proc/<pid>/stat: command name, start time,
// and user+system CPU of the process and of its reaped children (clock
// ticks of 10 ms).
type procStat struct {
	comm       string
	start      string
	own, child time.Duration
}

func parseProcStat(b []byte) (procStat, bool) {
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i || j+2 > len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[j+2:])
	if len(f) < 20 {
		return procStat{}, false
	}
	tick := func(k int) time.Duration {
		n, _ := strconv.Atoi(f[k])
		return time.Duration(n) * 10 * time.Millisecond
	}
	return procStat{comm: s[i+1 : j], start: f[19], own: tick(11) + tick(12), child: tick(13) + tick(14)}, true
}

// benchProcs reads every process when SCOUR_BENCH_PROCS is set (before
// the round's machine CPU is measured: reading /proc costs some), else nil.
func benchProcs() procTable {
	if os.Getenv("SCOUR_BENCH_PROCS") == "" {
		return nil
	}
	return readProcs()
}

// procTable is every process on the machine by its /proc path.
type procTable map[string]procStat

func readProcs() procTable {
	out := procTable{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		if st, ok := parseProcStat(b); ok {
			out[p] = st
		}
	}
	return out
}

// printProcDiff prints the CPU each kind of process used from a to b, per
// device. A process is the same one in both when its pid and start time
// match; kernel workers, which rename themselves after their current
// work queue, count as one kind.
func printProcDiff(name string, a, b procTable, devices int) {
	by := map[string]time.Duration{}
	for p, e := range b {
		d := e.own + e.child
		if o, ok := a[p]; ok && o.start == e.start {
			d -= o.own + o.child
		}
		kind := e.comm
		if strings.HasPrefix(kind, "kworker/") {
			kind = "kworker"
		}
		if d > 0 {
			by[kind] += d
		}
	}
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(x, y string) int { return int(by[y] - by[x]) })
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(by[k])/float64(time.Millisecond)/float64(devices)))
	}
	fmt.Printf("PROCS %s, ms of CPU per device: %s\n", name, strings.Join(parts, ", "))
}
