package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/internal/testkit"
)

// Cloud is one test's OpenStack: a private vhost on the shared broker, the
// shared Placement behind the test's own fault proxy, and the scourd hosts
// the test adds.
type Cloud struct {
	Bus   *harness.Broker
	P     *harness.Placement
	hosts []*Host
}

// NewCloud starts (or joins) the broker and Placement for t.
func NewCloud(t *testing.T) *Cloud {
	t.Helper()
	return &Cloud{Bus: harness.StartRabbitMQ(t).VHost(t), P: harness.StartPlacement(t)}
}

// SimDevice is one simulated one-time-use device of a host.
type SimDevice struct {
	Address     string
	Kind        string // nvme (default) | gpu | fpga (an Intel PAC N3000, two regions)
	PercentUsed int    // initial NVMe wear
	SANICAP     int    // default 0x2 (block sanitize)
}

// Host is one compute host: its Placement provider tree and its scourd.
type Host struct {
	Name    string
	Node    *harness.ComputeNode
	Dir     string // claims database, simulator state
	Devices []SimDevice
	cloud   *Cloud
	config  string
	http    string
	dsn     string // the shared PostgreSQL claims database (WithSharedClaims), else ""

	mu   sync.Mutex
	cmd  *exec.Cmd
	logs *testkit.SyncBuffer
	exit chan error
}

// HostOption tunes a host's scourd configuration.
type HostOption func(cfg map[string]any)

// WithReconcileInterval sets lifecycle.reconcile_interval (default 2s in
// these tests, so that the reconciler alone finishes scenarios quickly).
func WithReconcileInterval(d time.Duration) HostOption {
	return func(cfg map[string]any) { cfg["lifecycle"].(map[string]any)["reconcile_interval"] = d.String() }
}

// WithSharedClaims stores the host's claims in the PostgreSQL database
// dsn (sharedClaimsDB), which every host given the same dsn shares, as a
// fleet with one central claims database does; the dispatcher then
// routes broadcasts by it (bus.broadcast_routing auto).
func WithSharedClaims(dsn string) HostOption {
	return func(cfg map[string]any) {
		cl := cfg["claims"].(map[string]any)
		cl["driver"], cl["dsn"] = "postgres", dsn
	}
}

// sharedClaimsDB creates an empty PostgreSQL schema for t (the local
// server every development and CI machine runs, or
// SCOUR_TEST_POSTGRES_DSN) and returns a DSN that uses it; the schema is
// dropped when t ends.
func sharedClaimsDB(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SCOUR_TEST_POSTGRES_DSN")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	schema := "e2e_" + strings.ReplaceAll(harness.NewUUID(), "-", "")[:16]
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("PostgreSQL at %s (start it with scripts/ensure-services.sh or set SCOUR_TEST_POSTGRES_DSN): create schema: %v", base, err)
	}
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// WithSlowWipes makes every simulated operation report progress in steps
// of d (simulator "slow" faults), so a test can act mid-wipe.
func WithSlowWipes(d time.Duration) HostOption {
	return func(cfg map[string]any) {
		sim := cfg["hardware"].(map[string]any)["simulator"].(map[string]any)
		sim["step"] = d.String()
		for _, dev := range sim["devices"].([]map[string]any) {
			dev["faults"] = map[string]string{"sanitize": "slow", "format": "slow"}
		}
	}
}

// AddHost seeds a compute node with devs in Placement (as nova-compute
// does) and starts a scourd for it on simulated hardware.
func (c *Cloud) AddHost(t *testing.T, devs []SimDevice, opts ...HostOption) *Host {
	t.Helper()
	name := harness.UniqueName("cmp")
	for i := range devs {
		if devs[i].Kind == "" {
			devs[i].Kind = "nvme"
		}
		if devs[i].SANICAP == 0 {
			devs[i].SANICAP = 0x2
		}
	}
	h := &Host{Name: name, Node: c.P.SeedComputeNode(t, name, seedDevices(devs)...), Dir: t.TempDir(), Devices: devs, cloud: c}
	h.http = freeAddr(t)
	cfg := h.baseConfig()
	for _, o := range opts {
		o(cfg)
	}
	if cl := cfg["claims"].(map[string]any); cl["driver"] == "postgres" {
		h.dsn = cl["dsn"].(string)
	}
	return c.start(t, h, cfg)
}

// seedDevices is what nova-compute reports to Placement for devs: each a
// one-time-use device with its kind's vendor and product.
func seedDevices(devs []SimDevice) []harness.Device {
	var seed []harness.Device
	for _, d := range devs {
		vendor, product := "144d", "a80a"
		switch d.Kind {
		case "gpu":
			vendor, product = "10de", "20b5"
		case "fpga":
			vendor, product = "8086", "0b30"
		}
		seed = append(seed, harness.Device{Address: d.Address, VendorID: vendor, ProductID: product, OneTimeUse: true})
	}
	return seed
}

func (h *Host) baseConfig() map[string]any {
	var simDevs []map[string]any
	for _, d := range h.Devices {
		sd := map[string]any{"address": d.Address, "kind": d.Kind, "serial": "S" + strings.NewReplacer(":", "", ".", "").Replace(d.Address)}
		switch d.Kind {
		case "nvme":
			sd["vendor_id"], sd["device_id"] = "0x144d", "0xa80a"
			sd["sanicap"], sd["percent_used"], sd["media_bytes"] = d.SANICAP, d.PercentUsed, 1<<20
		case "fpga": // the simulator's N3000 ids (0x8086:0x0b30, class 0x120000)
			sd["fpga_regions"], sd["memory_bytes"] = 2, 1<<20
		default:
			sd["vendor_id"], sd["device_id"] = "0x10de", "0x20b5"
			sd["memory_bytes"] = 1 << 20
		}
		simDevs = append(simDevs, sd)
	}
	return map[string]any{
		"host": h.Name,
		"log":  map[string]any{"level": "debug", "format": "text"},
		"http": map[string]any{"address": h.http},
		"bus": map[string]any{
			"url":              h.cloud.Bus.URL(),
			"retry":            map[string]any{"attempts": 3, "initial": "100ms", "max": "1s"},
			"shutdown_timeout": "5s",
		},
		"placement": map[string]any{
			"endpoint": h.cloud.P.URL(), "token": h.cloud.P.Token(),
			"retry": map[string]any{"attempts": 5, "base": "50ms", "max": "500ms", "budget": "5s"},
		},
		"claims": map[string]any{"driver": "sqlite", "state_path": filepath.Join(h.Dir, "state")},
		"admin":  map[string]any{"socket": filepath.Join(h.Dir, "scourd.sock")},
		"hardware": map[string]any{
			"backend":   "simulated",
			"simulator": map[string]any{"state_dir": filepath.Join(h.Dir, "sim"), "step": "50ms", "devices": simDevs},
		},
		"pipelines": map[string]any{
			"max_concurrent": 4,
			"profiles": []map[string]any{
				{
					"name": "nvme", "match": map[string]any{"kinds": []string{"nvme"}},
					"pipeline": map[string]any{"name": "nvme-e2e", "version": 1, "max_runs": 2, "category": "purge", "steps": []map[string]any{
						{"name": "wear", "type": "nvme-wear-check", "args": map[string]any{"max_percent_used": 90}},
						{"name": "sanitize", "type": "nvme-sanitize", "timeout": "2m"},
						{"name": "verify", "type": "verify", "args": map[string]any{"mode": "all"}},
						{"name": "reset", "type": "pci-reset", "requires": map[string]any{"pci.reset": true}, "on_unsupported": "skip"},
					}},
				},
				{
					"name": "gpu", "match": map[string]any{"kinds": []string{"gpu"}},
					"pipeline": map[string]any{"name": "gpu-e2e", "version": 1, "steps": []map[string]any{
						{"name": "scrub", "type": "gpu-scrub", "timeout": "2m"},
					}},
				},
			},
		},
		"lifecycle": map[string]any{
			"reconcile_interval": "2s", "scan_debounce": "100ms", "follow_up_delay": "1s",
			"backoff_base": "1s", "backoff_max": "2s", "stuck_after": "5m",
		},
	}
}

// Start runs scourd for h and waits until it consumes (/readyz).
func (h *Host) Start(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		t.Fatalf("scourd %s already running", h.Name)
	}
	if h.logs == nil {
		h.logs = &testkit.SyncBuffer{}
	}
	cmd := exec.Command(filepath.Join(bins, "scourd"), "--config", h.config)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	// Benchmarks only: settings for every scourd the run starts, as
	// environment overrides (SCOUR_BENCH_SCOURD_ENV="SCOUR_PLACEMENT_MAX_PARALLEL_WRITES=1 ...").
	cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("SCOUR_BENCH_SCOURD_ENV"))...)
	if dir := os.Getenv("SCOUR_BENCH_CPU_PROFILE_DIR"); dir != "" {
		// A CPU profile per scourd run (docs/operations.md, "Where the time goes").
		cmd.Env = append(cmd.Env, "SCOUR_CPU_PROFILE="+filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", h.Name, time.Now().UnixNano())))
	}
	cmd.Stdout, cmd.Stderr = h.logs, h.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting scourd %s: %v", h.Name, err)
	}
	h.cmd, h.exit = cmd, make(chan error, 1)
	go func(c *exec.Cmd, exit chan error) { exit <- c.Wait() }(cmd, h.exit)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-h.exit:
			h.cmd = nil
			t.Fatalf("scourd %s exited during start: %v\n%s", h.Name, err, h.logs.String())
		default:
		}
		if resp, err := http.Get("http://" + h.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("scourd %s not ready after 60s:\n%s", h.Name, h.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops scourd gracefully (SIGTERM); a no-op when it is not running.
func (h *Host) Stop(t *testing.T) { h.signal(t, syscall.SIGTERM) }

// Kill stops scourd with SIGKILL: no cleanup, no checkpoint flush.
func (h *Host) Kill(t *testing.T) { h.signal(t, syscall.SIGKILL) }

func (h *Host) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(sig)
	select {
	case <-h.exit:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exit
		t.Errorf("scourd %s did not stop within 30s of %v", h.Name, sig)
	}
	h.cmd = nil
	if t.Failed() {
		t.Logf("scourd %s log:\n%s", h.Name, h.logs.String())
	}
}

// Logs returns what scourd printed so far.
func (h *Host) Logs() string { return h.logs.String() }

// LogLen is the size of scourd's log so far; LogsFrom(LogLen()) later
// returns only what it logged since.
func (h *Host) LogLen() int { return h.logs.Len() }

// LogsFrom is scourd's log after its first off bytes.
func (h *Host) LogsFrom(off int) string { return h.logs.From(off) }

// Device is the Placement provider of the device at addr.
func (h *Host) Device(addr string) *harness.DeviceRP {
	d := h.Node.Device(addr)
	if d == nil {
		panic("no device " + addr + " on " + h.Name)
	}
	return d
}

// MediaPath is the simulated namespace file of an NVMe device.
func (h *Host) MediaPath(addr string) string {
	matches, _ := filepath.Glob(filepath.Join(h.Dir, "sim", addr, "nvme*n1.img"))
	if len(matches) != 1 {
		return ""
	}
	return matches[0]
}

// MediaZeroed reports whether the device's simulated media holds only zeros.
func (h *Host) MediaZeroed(t *testing.T, addr string) bool {
	t.Helper()
	b, err := os.ReadFile(h.MediaPath(addr))
	if err != nil {
		t.Fatalf("reading media of %s: %v", addr, err)
	}
	return len(b) > 0 && bytes.Count(b, []byte{0}) == len(b)
}

// FaultFile makes the simulator fail (kind "fail") or hang an operation of
// addr in the running scourd.
func (h *Host) FaultFile(t *testing.T, addr, kind, op string) {
	t.Helper()
	p := filepath.Join(h.Dir, "sim", addr, kind+"-"+op)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// storeArgs are the scourctl flags naming h's claims store: its state
// directory, or the shared database and h's host name in it.
func (h *Host) storeArgs() []string {
	if h.dsn != "" {
		return []string{"--dsn", h.dsn, "--host", h.Name}
	}
	return []string{"--state-path", filepath.Join(h.Dir, "state")}
}

// Records exports the device's cleaning records through scourctl, as an
// operator would.
func (h *Host) Records(t *testing.T, addr string) []map[string]any {
	t.Helper()
	h.waitReturnsRecorded(t, addr)
	out, err := exec.Command(filepath.Join(bins, "scourctl"), append(append([]string{"records", "export", "--all"},
		h.storeArgs()...), "--device", addr)...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "no finished") || strings.Contains(string(out), "no record") {
			return nil
		}
		t.Fatalf("scourctl records export %s: %v\n%s", addr, err, out)
	}
	var recs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("scourctl records export %s: not JSON: %v\n%s", addr, err, out)
		}
		switch v := v.(type) {
		case []any:
			for _, r := range v {
				recs = append(recs, r.(map[string]any))
			}
		case map[string]any:
			recs = append(recs, v)
		}
	}
	return recs
}

// waitReturnsRecorded waits (up to 10s) until no cleaned run of addr is
// still open: scourd records "returned" just after the un-reserve that a
// test sees in Placement first.
func (h *Host) waitReturnsRecorded(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(filepath.Join(bins, "scourctl"), append(append([]string{"records", "list"}, h.storeArgs()...),
			"--device", addr, "--state", "cleaned", "-c", "ended", "-o", "json")...).CombinedOutput()
		var rows []map[string]any
		if err != nil || json.Unmarshal(out, &rows) != nil {
			return // Records reports the store's problem
		}
		open := false
		for _, r := range rows {
			open = open || r["ended"] == "" || r["ended"] == nil
		}
		if !open || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Boot plays nova-compute booting inst on h with devs: allocation, burn,
// instance.create.end.
func (c *Cloud) Boot(t *testing.T, h *Host, inst string, f harness.Format, devs ...string) {
	t.Helper()
	var rps []*harness.DeviceRP
	for _, a := range devs {
		rps = append(rps, h.Device(a))
	}
	c.P.AllocateInstance(t, inst, "tenant-a", "user-a", h.Node, rps...)
	for _, d := range rps {
		c.P.Burn(t, d)
	}
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.create.end", InstanceUUID: inst, Host: h.Name, Node: h.Name,
		ProjectID: "tenant-a", UserID: "user-a"}, f)
}

// Delete plays Nova deleting inst on h: allocations gone, then
// instance.delete.end.
func (c *Cloud) Delete(t *testing.T, h *Host, inst string, f harness.Format) {
	t.Helper()
	c.P.DeleteAllocations(t, inst)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name}, f)
}

// Reserved is the device's reserved inventory now.
func (c *Cloud) Reserved(t *testing.T, d *harness.DeviceRP) int {
	t.Helper()
	return c.P.Inventory(t, d.UUID, d.ResourceClass).Reserved
}

// Quarantined reports whether the device carries scour's quarantine trait.
func (c *Cloud) Quarantined(t *testing.T, d *harness.DeviceRP) bool {
	t.Helper()
	for _, tr := range c.P.Traits(t, d.UUID) {
		if tr == "CUSTOM_SCOUR_QUARANTINED" {
			return true
		}
	}
	return false
}

// Eventually polls cond until it holds or timeout passes; cond says why
// it does not hold yet, for the failure message.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitAvailable waits until the device is back in the pool (reserved 0).
func (c *Cloud) WaitAvailable(t *testing.T, h *Host, addr string, timeout time.Duration) {
	t.Helper()
	d := h.Device(addr)
	Eventually(t, timeout, fmt.Sprintf("device %s on %s returned to the pool", addr, h.Name), func() (bool, string) {
		r := c.Reserved(t, d)
		return r == 0, fmt.Sprintf("reserved=%d; scourd log tail:\n%s", r, tail(h.Logs(), 30))
	})
}

// Never checks that cond stays false for d (the reconciler gets several
// chances to do the wrong thing).
func Never(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if bad, why := cond(); bad {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start writes cfg as h's scour.yaml, adds h to the cloud and starts its
// scourd, stopped when the test ends.
func (c *Cloud) start(t *testing.T, h *Host, cfg map[string]any) *Host {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.config = filepath.Join(h.Dir, "scour.yaml")
	if err := os.WriteFile(h.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.hosts = append(c.hosts, h)
	h.Start(t)
	t.Cleanup(func() { h.Stop(t) })
	return h
}
