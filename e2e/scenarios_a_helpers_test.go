package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Helpers of the scenarios in scenarios_a_test.go (prefixed "a" so they
// cannot collide with other scenario files of the package).

// aAddHost is Cloud.AddHost, then waits for scourd's start scan to end,
// so that the scan cannot race Nova's allocate-then-burn of the first boot
// (the reconciler would burn the device itself, and the harness's burn
// could then meet a generation conflict).
func aAddHost(t *testing.T, c *Cloud, devs []SimDevice, opts ...HostOption) *Host {
	t.Helper()
	h := c.AddHost(t, devs, opts...)
	Eventually(t, 60*time.Second, "scourd "+h.Name+" finished its start scan", func() (bool, string) {
		n, _ := aMetric(aMetrics(t, h), "scour_lifecycle_scans_total", `result="ok"`)
		return n >= 1, fmt.Sprintf("scans_total{result=\"ok\"}=%v", n)
	})
	return h
}

// aWaitLog waits until one line of h's log holds every substring.
func aWaitLog(t *testing.T, h *Host, timeout time.Duration, substrs ...string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("scourd %s logs a line with %q", h.Name, substrs), func() (bool, string) {
		n := aCountLog(h, substrs...)
		return n > 0, "no such line; log tail:\n" + tail(h.Logs(), 30)
	})
}

// aCountLog counts the lines of h's log that hold every substring.
func aCountLog(h *Host, substrs ...string) int {
	n := 0
	for _, line := range strings.Split(h.Logs(), "\n") {
		ok := true
		for _, s := range substrs {
			if !strings.Contains(line, s) {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// aRecordStates lists the result states of the device's cleaning records
// (returned, quarantined, failed, ...), in export order.
// aReturnedOnce fails unless addr has exactly one returned record and
// every other record is of a run that ended before any destructive step
// because Placement's all-clear came too slowly (pipeline's clearNow:
// retry-later, the device kept reserved). On a loaded machine Placement
// behind Keystone has answered 4 checks in a row in over a second each;
// such a run is the safe outcome, not a second cleaning.
func aReturnedOnce(t *testing.T, h *Host, addr string) {
	t.Helper()
	var states []string
	returned := 0
	for _, r := range h.Records(t, addr) {
		res, _ := r["result"].(map[string]any)
		s, _ := res["state"].(string)
		sum, _ := res["summary"].(string)
		states = append(states, s)
		switch {
		case s == "returned":
			returned++
		case s == "failed" && strings.Contains(sum, "too slow an answer to start step"):
		default:
			t.Errorf("%s: a %s record (%q): only runs stopped by a slow all-clear may precede the returned one", addr, s, sum)
		}
	}
	if returned != 1 {
		t.Fatalf("%s records: %v; want one returned", addr, states)
	}
}

func aRecordStates(t *testing.T, h *Host, addr string) []string {
	t.Helper()
	var states []string
	for _, r := range h.Records(t, addr) {
		res, _ := r["result"].(map[string]any)
		s, _ := res["state"].(string)
		states = append(states, s)
	}
	return states
}

// aCount counts the occurrences of s in states.
func aCount(states []string, s string) int {
	n := 0
	for _, x := range states {
		if x == s {
			n++
		}
	}
	return n
}

// aMetrics fetches h's Prometheus exposition, as a scraper would.
func aMetrics(t *testing.T, h *Host) string {
	t.Helper()
	resp, err := http.Get("http://" + h.http + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics of scourd %s: %v", h.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of scourd %s: status %d, %v", h.Name, resp.StatusCode, err)
	}
	return string(b)
}

// aMetric sums the samples of metric name (exact) whose label set holds
// every labels substring (e.g. `verdict="clean"`); found is false when no
// such series is exposed at all.
func aMetric(text, name string, labels ...string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, lbls, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(lbls, l) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// aWantMetric fails t unless metric name with labels sums to want (a
// series not exposed counts as 0: counter vectors start empty).
func aWantMetric(t *testing.T, text, name string, want float64, labels ...string) {
	t.Helper()
	got, found := aMetric(text, name, labels...)
	if !found && want != 0 {
		t.Errorf("/metrics has no %s%v series", name, labels)
		return
	}
	if got != want {
		t.Errorf("/metrics: %s%v = %v, want %v", name, labels, got, want)
	}
}

// aWriteTenantData fills the device's simulated media with non-zero bytes,
// as an instance using the device would, so that the next wipe shows.
func aWriteTenantData(t *testing.T, h *Host, addr string) {
	t.Helper()
	p := h.MediaPath(addr)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("media of %s: %v", addr, err)
	}
	block := []byte("TENANT-DATA " + addr + " written by the unshelved instance\n")
	data := bytes.Repeat(block, int(fi.Size())/len(block)+1)[:fi.Size()]
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatalf("writing tenant data to %s: %v", addr, err)
	}
}
