package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Helpers of the scenarios in scenarios_b_test.go (moves between hosts,
// crashes, races and broker restarts).

// placementDo sends one request to the Placement backend (never through
// the test's fault proxy) and returns the status and body. It does not
// touch t, so a background sampler goroutine may use it.
func placementDo(p *harness.Placement, method, path, mv string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.BackendURL()+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-Auth-Token", p.Token())
	req.Header.Set("OpenStack-API-Version", "placement "+mv)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// readReserved reads the device's reserved inventory without failing a
// test (for samplers running beside the test goroutine).
func readReserved(p *harness.Placement, d *harness.DeviceRP) (int, error) {
	code, raw, err := placementDo(p, http.MethodGet, "/resource_providers/"+d.UUID+"/inventories/"+d.ResourceClass, harness.Microversion, nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET inventory of %s: %d %s", d.Name, code, raw)
	}
	var inv harness.Inventory
	if err := json.Unmarshal(raw, &inv); err != nil {
		return 0, err
	}
	return inv.Reserved, nil
}

// setReserved PUTs the device's inventory with reserved = n, every other
// field as read (microversion 1.26, as Nova and scour write it). Used for
// what neither Nova nor scour does by itself: an operator (or another
// agent) un-reserving a device by hand, and lifting a burn around a move
// Placement would refuse otherwise (see moveBurned).
func setReserved(t *testing.T, p *harness.Placement, d *harness.DeviceRP, n int) {
	t.Helper()
	inv, gen := p.Inventories(t, d.UUID)
	i := inv[d.ResourceClass]
	body := map[string]any{
		"resource_provider_generation": gen,
		"total":                        i.Total, "reserved": n,
		"min_unit": i.MinUnit, "max_unit": i.MaxUnit, "step_size": i.StepSize,
		"allocation_ratio": i.AllocationRatio,
	}
	code, raw, err := placementDo(p, http.MethodPut, "/resource_providers/"+d.UUID+"/inventories/"+d.ResourceClass, "1.26", body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("setting reserved=%d on %s: %d %s %v", n, d.Name, code, raw, err)
	}
}

// withBurnsLifted runs a Nova allocation move that Placement 8.0.0 refuses
// while the devices involved are burned, and burns them again right after.
//
// Modelling note. Placement replaces the consumers' allocations of a POST
// /allocations and then checks capacity, (total - reserved) * ratio, which
// is 0 on a burned one-time-use device: moving a burned device's allocation
// to a migration consumer (resize, live migration) or back to the instance
// (revert) answers 409 (TestPlacementRefusesMovingABurnedDevicesAllocation
// in e2e/harness). To reach the Placement state such a move leaves (the
// source device burned and held by the migration consumer, the instance on
// the destination), the test lifts the burn for the one POST and burns again
// at once, as Nova's move claim does. Scour sees none of it: the hosts of
// these scenarios have an hour-long reconcile interval and no notification
// is published in that window, so no scan runs. Had one run, scour would
// have burned the device again and the POST would have failed with 409,
// failing the test loudly rather than passing it wrongly.
func withBurnsLifted(t *testing.T, c *Cloud, devs []*harness.DeviceRP, move func()) {
	t.Helper()
	for _, d := range devs {
		setReserved(t, c.P, d, 0)
	}
	move()
	for _, d := range devs {
		c.P.Burn(t, d)
	}
}

// waitLog waits until h's log has a line containing every one of parts,
// and returns the first such line.
func waitLog(t *testing.T, h *Host, timeout time.Duration, parts ...string) string {
	t.Helper()
	var line string
	Eventually(t, timeout, fmt.Sprintf("scourd %s logs %q", h.Name, parts), func() (bool, string) {
		line = findLine(h.Logs(), parts...)
		return line != "", "log tail:\n" + tail(h.Logs(), 40)
	})
	return line
}

// findLine returns the first line of logs containing every one of parts.
func findLine(logs string, parts ...string) string {
	for _, l := range strings.Split(logs, "\n") {
		if containsAll(l, parts...) {
			return l
		}
	}
	return ""
}

// countLines counts the lines of logs containing every one of parts.
func countLines(logs string, parts ...string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if containsAll(l, parts...) {
			n++
		}
	}
	return n
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// logAttr returns the value of key=value in a slog text line.
func logAttr(line, key string) string {
	m := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(key) + `=("(?:[^"\\]|\\.)*"|\S+)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}

// waitClaim waits until h recorded a claim for inst.
func waitClaim(t *testing.T, h *Host, inst string) {
	t.Helper()
	waitLog(t, h, 30*time.Second, `msg="claim recorded"`, inst)
}

// ready reports whether h's scourd answers /readyz with 200.
func ready(h *Host) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + h.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stayInUse checks, for d, that the device keeps its owner's allocation,
// stays reserved (burned), keeps its media and gets no cleaning record,
// while scour has every chance to get it wrong.
func stayInUse(t *testing.T, c *Cloud, h *Host, addr, owner string, d time.Duration) {
	t.Helper()
	dev := h.Device(addr)
	Never(t, d, fmt.Sprintf("device %s on %s in use by %s", addr, h.Name, owner), func() (bool, string) {
		if r := c.Reserved(t, dev); r != 1 {
			return true, fmt.Sprintf("reserved=%d, want 1 (burned, in use)", r)
		}
		if a := c.P.Allocations(t, dev.UUID); len(a) != 1 || a[owner] == nil {
			return true, fmt.Sprintf("allocations %v, want only %s's", a, owner)
		}
		if h.MediaZeroed(t, addr) {
			return true, "its media was wiped"
		}
		return false, ""
	})
	if recs := h.Records(t, addr); len(recs) != 0 {
		t.Errorf("device %s on %s in use by %s has cleaning records: %v", addr, h.Name, owner, recs)
	}
}

// cleanedFor checks that addr was returned with its media wiped and one
// cleaning record naming inst as the previous tenant.
func cleanedFor(t *testing.T, c *Cloud, h *Host, addr, inst string) {
	t.Helper()
	c.WaitAvailable(t, h, addr, 60*time.Second)
	if !h.MediaZeroed(t, addr) {
		t.Errorf("device %s on %s returned to the pool but its media was not wiped", addr, h.Name)
	}
	recs := h.Records(t, addr)
	if len(recs) != 1 {
		t.Fatalf("device %s on %s: want 1 cleaning record, got %d: %v", addr, h.Name, len(recs), recs)
	}
	if got := nested(recs[0], "previous_tenant", "instance_uuid"); got != inst {
		t.Errorf("device %s on %s: record names previous tenant %q, want %s", addr, h.Name, got, inst)
	}
}

func nested(m map[string]any, keys ...string) string {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[k]
	}
	s, _ := v.(string)
	return s
}

// reservedSampler records every change of a device's reserved value,
// sampled every 25ms, until stopped.
type reservedSampler struct {
	mu   sync.Mutex
	seen []int
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func sampleReserved(t *testing.T, p *harness.Placement, d *harness.DeviceRP) *reservedSampler {
	s := &reservedSampler{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { s.Stop() })
	go func() {
		defer close(s.done)
		for {
			r, err := readReserved(p, d) // a failed read is a missed sample
			s.mu.Lock()
			if err == nil && (len(s.seen) == 0 || s.seen[len(s.seen)-1] != r) {
				s.seen = append(s.seen, r)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the sequence of distinct values seen.
func (s *reservedSampler) Stop() []int {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.seen...)
}

// withSimStep sets the simulator's progress step without adding faults;
// tests add slow faults per device and operation with FaultFile.
func withSimStep(d time.Duration) HostOption {
	return func(cfg map[string]any) {
		cfg["hardware"].(map[string]any)["simulator"].(map[string]any)["step"] = d.String()
	}
}

// pausePlugin is a plugin (docs/plugins.md, protocol 1.0) whose CLEAN
// only sleeps SCOUR_ARG_SECONDS: a slow step that touches nothing.
const pausePlugin = `#!/bin/sh
case "${SCOUR_COMMAND:-}" in
VERSION) echo '{"supported_versions":["1.0"]}'; exit 0 ;;
esac
cat >/dev/null
if [ "$SCOUR_COMMAND" = CLEAN ]; then
	echo "pausing ${SCOUR_ARG_SECONDS}s before the wipe" >&2
	sleep "${SCOUR_ARG_SECONDS}"
fi
echo '{"status":"ok"}'
`

// withPauseStep adds a non-destructive plugin step that takes d to the
// NVMe pipeline (a new pipeline version): before its steps (first) or
// after them, so a test can act while a run is in flight before its first
// destructive step, or after its last one. The plugin lives in a
// root-owned directory of the test's own, as scour's plugin rules want.
func withPauseStep(t *testing.T, d time.Duration, first bool) HostOption {
	t.Helper()
	return withPluginStep(t, "pause", pausePlugin, map[string]any{"seconds": int(d.Seconds())}, first)
}

// withPluginStep adds a non-destructive plugin step named name, running
// script with args, to the NVMe pipeline (a new pipeline version): before
// its steps (first) or after them. The plugin lives in a root-owned
// directory of the test's own, as scour's plugin rules want.
func withPluginStep(t *testing.T, name, script string, args map[string]any, first bool) HostOption {
	t.Helper()
	path := installPlugin(t, name, script)
	return withNVMePipeline(path, func(p map[string]any) {
		p["version"] = 2
		step := map[string]any{"name": name, "type": "plugin", "path": path, "destructive": false, "args": args}
		steps := p["steps"].([]map[string]any)
		if first {
			p["steps"] = append([]map[string]any{step}, steps...)
		} else {
			p["steps"] = append(steps, step)
		}
	})
}

// reallocate replaces every allocation of inst by the flavor's resources
// on node plus one unit of each of devs (PUT /allocations/{inst} at the
// consumer's generation), as the scheduler's claim for an evacuation does
// once the source's part is gone.
func reallocate(t *testing.T, p *harness.Placement, inst string, node *harness.ComputeNode, devs ...*harness.DeviceRP) {
	t.Helper()
	code, raw, err := placementDo(p, http.MethodGet, "/allocations/"+inst, harness.Microversion, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /allocations/%s: %d %s %v", inst, code, raw, err)
	}
	var cur struct {
		Generation *int   `json:"consumer_generation"`
		ProjectID  string `json:"project_id"`
		UserID     string `json:"user_id"`
	}
	if err := json.Unmarshal(raw, &cur); err != nil {
		t.Fatal(err)
	}
	allocs := map[string]any{node.UUID: map[string]any{"resources": map[string]int{"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}}
	for _, d := range devs {
		allocs[d.UUID] = map[string]any{"resources": map[string]int{d.ResourceClass: 1}}
	}
	body := map[string]any{"allocations": allocs, "consumer_generation": cur.Generation,
		"project_id": cur.ProjectID, "user_id": cur.UserID, "consumer_type": "INSTANCE"}
	code, raw, err = placementDo(p, http.MethodPut, "/allocations/"+inst, harness.Microversion, body)
	if err != nil || code != http.StatusNoContent {
		t.Fatalf("PUT /allocations/%s: %d %s %v", inst, code, raw, err)
	}
}
