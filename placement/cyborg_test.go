package placement

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/scour-project/scour/internal/testkit"
)

// cyborgFake is a host with one dirty one-time-use device (d1, held by
// instance inst-1 when held is set) and one fenced, free Cyborg FPGA
// (c1, 4 units, reserved 4) that a scan finds dirty. failPlain and
// failQuar make the OWNER_CYBORG listings fail as a Placement that does
// not know the trait answers.
type cyborgFake struct {
	failPlain, failQuar, held atomic.Bool
}

func (cf *cyborgFake) handle(w http.ResponseWriter, r *http.Request) {
	req := r.URL.Query().Get("required")
	switch {
	case r.URL.Query().Get("name") != "":
		io.WriteString(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
	case r.URL.Path == "/resource_providers" && strings.HasPrefix(req, "OWNER_CYBORG"):
		quar := strings.Contains(req, DefaultQuarantineTrait)
		if (quar && cf.failQuar.Load()) || (!quar && cf.failPlain.Load()) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"errors": [{"status": 400, "title": "Bad Request", "detail": "No such trait(s): OWNER_CYBORG."}]}`)
			return
		}
		if quar {
			io.WriteString(w, `{"resource_providers": []}`)
			return
		}
		io.WriteString(w, `{"resource_providers": [{"uuid": "c1", "name": "cn_1_0000:83:00.0"}]}`)
	case r.URL.Path == "/resource_providers" && strings.Contains(req, DefaultQuarantineTrait):
		io.WriteString(w, `{"resource_providers": []}`)
	case r.URL.Path == "/resource_providers":
		io.WriteString(w, `{"resource_providers": [{"uuid": "d1", "name": "cn_1_0000:81:00.0"}]}`)
	case r.URL.Path == "/allocations/inst-1":
		if cf.held.Load() {
			io.WriteString(w, `{"allocations": {"d1": {"resources": {"CUSTOM_PCI_144D_A80A": 1}}, "c1": {"resources": {"FPGA": 1}}}, "project_id": "p", "user_id": "u"}`)
			return
		}
		io.WriteString(w, `{"allocations": {}}`)
	case r.URL.Path == "/resource_providers/c1/inventories":
		io.WriteString(w, `{"resource_provider_generation": 3, "inventories": {"FPGA":
		  {"total": 4, "reserved": 4, "min_unit": 1, "max_unit": 4, "step_size": 1, "allocation_ratio": 1.0}}}`)
	case r.URL.Path == "/resource_providers/c1/allocations":
		io.WriteString(w, `{"resource_provider_generation": 3, "allocations": {}}`)
	default:
		dirtyDevice(nil)(w, r)
	}
}

func newCyborgClient(t *testing.T, cf *cyborgFake) (*Client, *testkit.SyncBuffer, *prometheus.Registry) {
	t.Helper()
	cfg := unitConfig(startFake(t, &fakePlacement{handle: cf.handle}).URL)
	cfg.Cyborg.Enabled = true
	cfg.Cyborg.ReadARQs = new(bool)
	logs := &testkit.SyncBuffer{}
	reg := prometheus.NewPedanticRegistry()
	c, err := New(context.Background(), cfg, WithRegisterer(reg),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatal(err)
	}
	return c, logs, reg
}

func scanStates(t *testing.T, c *Client) map[string]Device {
	t.Helper()
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatalf("scan failed although only a Cyborg listing did: %v", err)
	}
	out := map[string]Device{}
	for _, d := range res.Devices {
		out[d.UUID] = d
	}
	return out
}

// A failing Cyborg listing must not stop the one-time-use devices' scan
// and bind, and must not make a Cyborg device scour fenced look free,
// unquarantined or gone.
func TestCyborgListingFailureKeepsOneTimeUsePath(t *testing.T) {
	t.Parallel()
	cf := &cyborgFake{}
	c, logs, reg := newCyborgClient(t, cf)

	devs := scanStates(t, c)
	if devs["d1"].State != StateDirty || devs["c1"].State != StateDirty || !devs["c1"].Cyborg {
		t.Fatalf("healthy scan: %+v", devs)
	}

	// Both Cyborg listings fail: the previous plain listing stands in,
	// but its quarantine is unknown, so c1 is left alone (unmanaged).
	cf.failPlain.Store(true)
	cf.failQuar.Store(true)
	for range 3 {
		devs = scanStates(t, c)
		if devs["d1"].State != StateDirty {
			t.Fatalf("one-time-use device: %+v", devs["d1"])
		}
		if d, ok := devs["c1"]; !ok || d.State != StateUnmanaged || !d.Cyborg || d.Inventory.Reserved != 4 {
			t.Fatalf("Cyborg device fenced last scan, listing failed: %+v (present %v), want it kept, unmanaged", d, ok)
		}
	}
	if n := strings.Count(logs.String(), "listing this host's Cyborg devices failed"); n != 2 {
		t.Errorf("%d WARNs for 3 scans with the plain and quarantine listings failing the same way, want 2 (once per listing)\n%s", n, logs.String())
	}
	want := `
# HELP scour_placement_cyborg_list_failures_total Listings of this host's Cyborg devices that failed (a trait Placement does not know, Placement failing past the retries), by the traits listed; the one-time-use devices are handled regardless (docs/cyborg.md).
# TYPE scour_placement_cyborg_list_failures_total counter
scour_placement_cyborg_list_failures_total{traits="OWNER_CYBORG"} 3
scour_placement_cyborg_list_failures_total{traits="OWNER_CYBORG,CUSTOM_SCOUR_QUARANTINED"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_placement_cyborg_list_failures_total"); err != nil {
		t.Error(err)
	}

	// The bind path: the instance's one-time-use device and, from the
	// previous listing, its Cyborg device.
	cf.held.Store(true)
	claim, err := c.InstanceDevices(context.Background(), "inst-1")
	if err != nil {
		t.Fatalf("InstanceDevices failed although only a Cyborg listing did: %v", err)
	}
	if len(claim.Devices) != 2 {
		t.Errorf("claim devices %+v, want d1 and c1", claim.Devices)
	}

	// Only the plain listing failing: the previous one stands in and the
	// quarantine listing tells, so c1 is managed as before.
	cf.failQuar.Store(false)
	devs = scanStates(t, c)
	if d := devs["c1"]; d.State != StateDirty || !d.Cyborg {
		t.Errorf("plain listing failing, quarantine listing fine: c1 %+v, want dirty Cyborg", d)
	}
	cf.failPlain.Store(false)
	scanStates(t, c)
	if n := strings.Count(logs.String(), "listing this host's Cyborg devices works again"); n != 2 {
		t.Errorf("%d INFOs on recovery, want 2", n)
	}
}

// A scourd started while the Cyborg listing fails (no previous listing):
// the one-time-use devices are handled, the Cyborg ones not listed at all
// (never returned, never counted free).
func TestCyborgListingFailureFromStart(t *testing.T) {
	t.Parallel()
	cf := &cyborgFake{}
	cf.failPlain.Store(true)
	cf.failQuar.Store(true)
	cf.held.Store(true)
	c, _, _ := newCyborgClient(t, cf)
	devs := scanStates(t, c)
	if len(devs) != 1 || devs["d1"].State != StateDirty {
		t.Fatalf("scan %+v, want d1 dirty alone", devs)
	}
	claim, err := c.InstanceDevices(context.Background(), "inst-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Devices) != 1 || claim.Devices[0].UUID != "d1" {
		t.Errorf("claim devices %+v, want d1", claim.Devices)
	}
}
