package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/scour-project/scour/hardware"
)

// fakePlacement answers the version document and trait creation itself and
// hands every other request to handle. It records what it was asked.
type fakePlacement struct {
	minVersion, maxVersion string
	rootBody               string // overrides the version document
	handle                 func(w http.ResponseWriter, r *http.Request)
	putTrait               func(name string) // sees each trait created, when set

	mu   sync.Mutex
	reqs []string
	hdrs []http.Header
}

func (f *fakePlacement) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r.Method+" "+r.URL.Path)
	f.hdrs = append(f.hdrs, r.Header.Clone())
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/":
		if f.rootBody != "" {
			io.WriteString(w, f.rootBody)
			return
		}
		fmt.Fprintf(w, `{"versions": [{"id": "v1.0", "min_version": %q, "max_version": %q, "status": "CURRENT"}]}`, f.minVersion, f.maxVersion)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/traits/"):
		if f.putTrait != nil {
			f.putTrait(strings.TrimPrefix(r.URL.Path, "/traits/"))
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		f.handle(w, r)
	}
}

func (f *fakePlacement) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func startFake(t *testing.T, f *fakePlacement) *httptest.Server {
	t.Helper()
	if f.minVersion == "" {
		f.minVersion = "1.0"
	}
	if f.maxVersion == "" {
		f.maxVersion = "1.39"
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

func unitConfig(url string) Config {
	return Config{Endpoint: url, Token: "admin", Node: "cn_1", RequestTimeout: 200 * time.Millisecond,
		Retry: RetryConfig{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond, Budget: 5 * time.Second}}
}

func TestNegotiateMicroversion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, min, max, root string
		want, wantErr        string
	}{
		{name: "placement 8.0.0", max: "1.39", want: "1.39"},
		{name: "newer than scour", max: "1.45", want: "1.39"},
		{name: "older but enough", max: "1.30", want: "1.30"},
		{name: "exactly the minimum", max: "1.26", want: "1.26"},
		{name: "below 1.26", max: "1.25", wantErr: "needs at least 1.26"},
		{name: "far below", max: "1.14", wantErr: "upgrade Placement"},
		{name: "minimum above scour's", min: "1.40", max: "1.50", wantErr: "upgrade scour"},
		{name: "garbage version document", root: `<html>proxy error</html>`, wantErr: "version document"},
		{name: "no v1", root: `{"versions": [{"id": "v2.0", "min_version": "2.0", "max_version": "2.1"}]}`, wantErr: "no v1 API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakePlacement{minVersion: tc.min, maxVersion: tc.max, rootBody: tc.root,
				handle: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"resource_providers": []}`) }}
			srv := startFake(t, f)
			c, err := New(context.Background(), unitConfig(srv.URL))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New: %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Microversion() != tc.want {
				t.Errorf("microversion %s, want %s", c.Microversion(), tc.want)
			}
			_, _ = c.Scan(context.Background())
			f.mu.Lock()
			last := f.hdrs[len(f.hdrs)-1]
			f.mu.Unlock()
			if got := last.Get("OpenStack-API-Version"); got != "placement "+tc.want {
				t.Errorf("request header OpenStack-API-Version %q, want %q", got, "placement "+tc.want)
			}
			if got := last.Get("X-Auth-Token"); got != "admin" {
				t.Errorf("X-Auth-Token %q", got)
			}
		})
	}
}

var unitDev = Ref{UUID: "0b5a3b53-3e43-4a6a-9b36-1df0c0c5b9e1", Name: "cn_1_0000:AF:00.0", Address: "0000:af:00.0"}

const dirtyInventory = `{"resource_provider_generation": 7, "inventories": {"CUSTOM_PCI_144D_A80A":
 {"total": 1, "reserved": 1, "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0000001}}}`

// dirtyDevice answers GETs for a dirty device and hands PUTs to put.
func dirtyDevice(put http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut:
			put(w, r)
		case strings.HasSuffix(r.URL.Path, "/inventories"):
			io.WriteString(w, dirtyInventory)
		case strings.HasSuffix(r.URL.Path, "/allocations"):
			io.WriteString(w, `{"resource_provider_generation": 7, "allocations": {}}`)
		case strings.HasSuffix(r.URL.Path, "/traits"):
			io.WriteString(w, `{"resource_provider_generation": 7, "traits": ["COMPUTE_MANAGED_PCI_DEVICE", "HW_PCI_ONE_TIME_USE"]}`)
		default:
			http.NotFound(w, r)
		}
	}
}

func placementError(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		codeField := ""
		if code != "" {
			codeField = fmt.Sprintf(`, "code": %q`, code)
		}
		fmt.Fprintf(w, `{"errors": [{"status": %d, "title": "x", "detail": "detail of %d"%s}]}`, status, status, codeField)
	}
}

func TestUnreserveErrorShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		handle      http.HandlerFunc
		recoverable bool
		is          error
		puts        int // PUT attempts expected (3 = the whole retry budget)
		contains    string
	}{
		{name: "409 concurrent_update is retried", handle: dirtyDevice(placementError(409, "placement.concurrent_update")),
			recoverable: true, is: errConflict, puts: 3, contains: "gave up after 3 tries"},
		{name: "409 without code is retried", handle: dirtyDevice(placementError(409, "")),
			recoverable: true, is: errConflict, puts: 3},
		{name: "409 other code is permanent", handle: dirtyDevice(placementError(409, "placement.inventory.inuse")),
			puts: 1, contains: "placement.inventory.inuse"},
		{name: "500 is retried then recoverable", handle: dirtyDevice(placementError(500, "")), recoverable: true, puts: 3},
		{name: "500 of a lost generation race is a conflict", handle: dirtyDevice(func(w http.ResponseWriter, r *http.Request) {
			// Placement 8.0.0's body, as seen from several workers on PostgreSQL.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			io.WriteString(w, `{"errors": [{"status": 500, "title": "Internal Server Error", "detail": "The server has either erred or is incapable of performing the requested operation.\n\n Another thread concurrently updated the resource provider data. Please retry your update  ", "code": "placement.undefined_code", "request_id": "req-1"}]}`)
		}), recoverable: true, is: errConflict, puts: 3, contains: "gave up after 3 tries"},
		{name: "502 html from a proxy", handle: dirtyDevice(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		}), recoverable: true, puts: 3, contains: "bad gateway"},
		{name: "406 microversion no longer served", handle: dirtyDevice(placementError(406, "")),
			is: ErrMicroversion, puts: 1, contains: "restart scour"},
		{name: "400 is permanent", handle: dirtyDevice(placementError(400, "placement.undefined_code")), puts: 1},
		{name: "timeout", handle: dirtyDevice(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}), recoverable: true, puts: 3},
		{name: "garbage JSON on read", handle: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"inventories": [not json`)
		}, recoverable: true, puts: 0},
		{name: "device gone", handle: placementError(404, "placement.undefined_code"), is: ErrNotFound, puts: 0,
			contains: "device_spec"},
		{name: "allocated", handle: func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/allocations") {
				io.WriteString(w, `{"resource_provider_generation": 7, "allocations": {"inst-1": {"resources": {"CUSTOM_PCI_144D_A80A": 1}}}}`)
				return
			}
			dirtyDevice(nil)(w, r)
		}, is: ErrAllocated, puts: 0, contains: "inst-1"},
		{name: "quarantined", handle: func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/traits") {
				io.WriteString(w, `{"resource_provider_generation": 7, "traits": ["CUSTOM_SCOUR_QUARANTINED"]}`)
				return
			}
			dirtyDevice(nil)(w, r)
		}, is: ErrQuarantined, puts: 0},
		{name: "not one-time-use", handle: func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/traits") {
				io.WriteString(w, `{"resource_provider_generation": 7, "traits": ["COMPUTE_MANAGED_PCI_DEVICE"]}`)
				return
			}
			dirtyDevice(nil)(w, r)
		}, is: ErrUnmanaged, puts: 0, contains: "no HW_PCI_ONE_TIME_USE trait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakePlacement{handle: tc.handle}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Unreserve(context.Background(), unitDev, nil)
			if err == nil {
				t.Fatal("Unreserve succeeded")
			}
			if IsRecoverable(err) != tc.recoverable {
				t.Errorf("IsRecoverable = %v, want %v: %v", !tc.recoverable, tc.recoverable, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if got := f.count("PUT /resource_providers/"); got != tc.puts {
				t.Errorf("%d PUTs, want %d", got, tc.puts)
			}
			for _, s := range []string{unitDev.Name, unitDev.UUID, string(unitDev.Address), tc.contains} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestUnreserveSendsEveryFieldBackWithContentLength(t *testing.T) {
	t.Parallel()
	var got map[string]json.RawMessage
	var contentLength int64
	var chunked []string
	f := &fakePlacement{handle: dirtyDevice(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		contentLength, chunked = r.ContentLength, r.TransferEncoding
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("PUT body %s: %v", b, err)
		}
		io.WriteString(w, `{}`)
	})}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unreserve(context.Background(), unitDev, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"resource_provider_generation": "7", "total": "1", "reserved": "0", "min_unit": "1",
		"max_unit": "1", "step_size": "1", "allocation_ratio": "1.0000001"}
	gotS := map[string]string{}
	for k, v := range got {
		gotS[k] = string(v)
	}
	if diff := cmp.Diff(want, gotS); diff != "" {
		t.Errorf("PUT body (-want +got):\n%s", diff)
	}
	if contentLength <= 0 || len(chunked) > 0 {
		t.Errorf("Content-Length %d, Transfer-Encoding %v: want a sized body (uwsgi rejects chunked)", contentLength, chunked)
	}
	if f.count("PUT /resource_providers/"+unitDev.UUID+"/inventories/CUSTOM_PCI_144D_A80A") != 1 {
		t.Errorf("requests: %v", f.reqs)
	}
}

func TestScanUnreachablePlacementIsRecoverable(t *testing.T) {
	t.Parallel()
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {}}
	srv := startFake(t, f)
	c, err := New(context.Background(), unitConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	srv.Close() // Placement goes away: connection refused from now on
	_, err = c.Scan(context.Background())
	if !IsRecoverable(err) || !strings.Contains(err.Error(), "cn_1") {
		t.Fatalf("Scan with Placement down: %v, want a recoverable error naming the node", err)
	}
}

func TestParseAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want hardware.Address
		ok   bool
	}{
		{"compute1_0000:81:00.0", "0000:81:00.0", true},
		{"compute1_0000:AF:00.0", "0000:af:00.0", true},
		{"my_host_name_0000:Af:1F.7", "0000:af:1f.7", true}, // last "_" wins
		{"compute1_af:00.0", "0000:af:00.0", true},
		{"compute1", "", false},
		{"compute1_", "", false},
		{"compute1_0000:81:00", "", false},
		{"compute1_0000:81:00.0_x", "", false},
	} {
		got, err := parseAddress(tc.name)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseAddress(%q) = %q, %v; want %q ok=%v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestDeriveState(t *testing.T) {
	t.Parallel()
	inv := func(total, reserved int) Inventory { return Inventory{Total: total, Reserved: reserved} }
	for _, tc := range []struct {
		name     string
		d        Device
		invCount int
		want     State
		wantWhy  bool
	}{
		{"available", Device{Inventory: inv(1, 0)}, 1, StateAvailable, false},
		{"in-use", Device{Inventory: inv(1, 0), Consumers: []string{"i"}}, 1, StateInUse, false},
		{"burned-in-use", Device{Inventory: inv(1, 1), Consumers: []string{"i"}}, 1, StateBurnedInUse, false},
		{"dirty", Device{Inventory: inv(1, 1)}, 1, StateDirty, false},
		{"quarantined", Device{Inventory: inv(1, 1), Quarantined: true}, 1, StateQuarantined, false},
		{"quarantined but schedulable", Device{Inventory: inv(1, 0), Quarantined: true}, 1, StateQuarantined, true},
		{"allocation beats quarantine", Device{Inventory: inv(1, 1), Quarantined: true, Consumers: []string{"i"}}, 1, StateBurnedInUse, false},
		{"total 2", Device{Inventory: inv(2, 0)}, 1, StateUnmanaged, true},
		{"two inventories", Device{Inventory: inv(1, 0)}, 2, StateUnmanaged, true},
		{"no inventory", Device{}, 0, StateUnmanaged, true},
	} {
		d := tc.d
		if d.Address == "" {
			d.Address = "0000:81:00.0"
		}
		deriveState(&d, tc.invCount)
		if d.State != tc.want || (d.Why != "") != tc.wantWhy {
			t.Errorf("%s: state %s why %q, want %s (why: %v)", tc.name, d.State, d.Why, tc.want, tc.wantWhy)
		}
	}
	d := Device{Inventory: inv(1, 0)}
	deriveState(&d, 1)
	if d.State != StateUnmanaged {
		t.Errorf("no address: %s, want unmanaged", d.State)
	}
}

func TestConfigValidateReportsEverythingAndNoSecrets(t *testing.T) {
	t.Parallel()
	c := Config{Node: "cn1", Token: "s3cret-token-value", Cert: "/nonexistent/cert.pem", Interface: "sideways",
		OneTimeUseTrait: "lower-case", QuarantineTrait: "NOT_CUSTOM", Retry: RetryConfig{Attempts: -1}}
	c.setDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	for _, want := range []string{"placement.token", "placement.cert and placement.key", "placement.cert:",
		"placement.interface", "one_time_use_trait", "quarantine_trait", "placement.retry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the token: %v", err)
	}
	ok := Config{Node: "cn1", Endpoint: "http://127.0.0.1:8778", Token: "admin"}
	ok.setDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if ok.OneTimeUseTrait != DefaultOneTimeUseTrait || ok.QuarantineTrait != DefaultQuarantineTrait || ok.PublishCapabilityTraits {
		t.Errorf("defaults: %+v", ok)
	}
}

func TestCapabilityTraits(t *testing.T) {
	t.Parallel()
	got := CapabilityTraits(hardware.Capabilities{
		"nvme.sanitize":     {Kind: hardware.KindOrdered, Items: []string{"overwrite", "crypto"}},
		"nvme.percent_used": {Kind: hardware.KindOrdered, Items: []string{"80"}},
		"pci.reset":         {Kind: hardware.KindBool, Bool: true},
		"pci.driver":        {Kind: hardware.KindSet, Items: []string{"vfio-pci"}},
		"gpu.ecc":           {Kind: hardware.KindBool, Bool: false},
		"fw.channels":       {Kind: hardware.KindSet, Items: []string{"stable-2.1"}},
	})
	// Wear changes during the device's life: no trait for a device_spec.
	want := []string{"CUSTOM_SCOUR_CAP_NVME_SANITIZE_CRYPTO", "CUSTOM_SCOUR_CAP_NVME_SANITIZE_OVERWRITE", "CUSTOM_SCOUR_CAP_PCI_RESET"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRefWithoutUUIDIsRefusedWithoutRequests(t *testing.T) {
	t.Parallel()
	f := &fakePlacement{handle: dirtyDevice(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := Ref{Name: "cn_1_0000:81:00.0", UUID: "../x"}
	for name, call := range map[string]func() error{
		"Unreserve":    func() error { return c.Unreserve(ctx, bad, nil) },
		"Burn":         func() error { return c.Burn(ctx, Ref{}) },
		"Quarantine":   func() error { return c.Quarantine(ctx, bad, "x") },
		"Unquarantine": func() error { return c.Unquarantine(ctx, bad) },
		"Instance":     func() error { _, err := c.InstanceDevices(ctx, "a/b"); return err },
	} {
		if err := call(); err == nil || IsRecoverable(err) {
			t.Errorf("%s with a bad reference: %v, want a permanent error", name, err)
		}
	}
	if n := f.count("PUT /resource_providers") + f.count("GET /resource_providers") + f.count("GET /allocations"); n != 0 {
		t.Errorf("%d requests made for bad references", n)
	}
}

func TestScanMetrics(t *testing.T) {
	t.Parallel()
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("name") != "":
			io.WriteString(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
		case strings.Contains(r.URL.Query().Get("required"), DefaultQuarantineTrait):
			io.WriteString(w, `{"resource_providers": []}`)
		case r.URL.Path == "/resource_providers":
			io.WriteString(w, `{"resource_providers": [
			  {"uuid": "d1", "name": "cn_1_0000:81:00.0"}, {"uuid": "d2", "name": "cn_1_0000:82:00.0"}]}`)
		default:
			dirtyDevice(nil)(w, r)
		}
	}}
	reg := prometheus.NewPedanticRegistry()
	cfg := unitConfig(startFake(t, f).URL)
	c, err := New(context.Background(), cfg, WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Devices) != 2 || res.Devices[0].State != StateDirty || res.Calls != 7 {
		t.Fatalf("scan: %d devices, calls %d: %+v", len(res.Devices), res.Calls, res.Devices)
	}
	want := `
# HELP scour_placement_last_scan_requests Placement requests the last host scan made (2 + 1 or 2 per device once the node is known: 1 while its inventory is unchanged since the last read).
# TYPE scour_placement_last_scan_requests gauge
scour_placement_last_scan_requests 7
# HELP scour_placement_requests_total HTTP requests scour made to Placement, by method and outcome (ok, conflict, HTTP status, error).
# TYPE scour_placement_requests_total counter
scour_placement_requests_total{method="GET",outcome="ok"} 8
scour_placement_requests_total{method="PUT",outcome="ok"} 1
`
	// GET / (negotiation) + 7 scan GETs; PUT /traits/<quarantine trait>.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"scour_placement_last_scan_requests", "scour_placement_requests_total"); err != nil {
		t.Error(err)
	}
	if c.Calls() != 9 {
		t.Errorf("Calls() = %d, want 9", c.Calls())
	}
}

func TestScanDropsDeviceDeletedMidScan(t *testing.T) {
	t.Parallel()
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("name") != "":
			io.WriteString(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
		case strings.Contains(r.URL.Query().Get("required"), DefaultQuarantineTrait):
			io.WriteString(w, `{"resource_providers": []}`)
		case r.URL.Path == "/resource_providers":
			io.WriteString(w, `{"resource_providers": [
			  {"uuid": "d1", "name": "cn_1_0000:81:00.0"}, {"uuid": "gone", "name": "cn_1_0000:82:00.0"}]}`)
		case strings.HasPrefix(r.URL.Path, "/resource_providers/gone/"):
			placementError(404, "placement.undefined_code")(w, r)
		default:
			dirtyDevice(nil)(w, r)
		}
	}}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Devices) != 1 || res.Devices[0].UUID != "d1" {
		t.Errorf("devices %+v, want only d1", res.Devices)
	}
}

// docs/placement.md's capability-trait table names every capability
// scour knows, published or not, so the mapping stays documented.
func TestDocsMapEveryCapabilityToTraits(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/placement.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "### Capability traits")
	if i < 0 {
		t.Fatal(`docs/placement.md has no "### Capability traits" section`)
	}
	doc = doc[i:]
	for _, s := range hardware.KnownCapabilities() {
		name := s.Name
		if s.Prefix {
			name += "*"
		}
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/placement.md capability traits table does not name %s", name)
		}
	}
}

// The requests a host makes at once (the cleans of one release read their
// devices together) keep their connections between bursts: the second
// burst opens none. Go's default of 2 idle connections per host closed
// all but 2 after each burst.
func TestConcurrentRequestsKeepTheirConnections(t *testing.T) {
	const burst = 8
	var mu sync.Mutex
	newConns, inFlight := 0, 0
	all := make(chan struct{})
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		// Hold each request until the whole burst is in flight, so that
		// the burst needs burst connections.
		mu.Lock()
		inFlight++
		if inFlight == burst {
			close(all)
		}
		mu.Unlock()
		<-all
		io.WriteString(w, `{"resource_provider_generation": 1, "inventories": {}}`)
	}}
	f.minVersion, f.maxVersion = "1.0", "1.39"
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			newConns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(context.Background(), unitConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		mu.Lock()
		inFlight, newConns = 0, 0
		all = make(chan struct{})
		mu.Unlock()
		var wg sync.WaitGroup
		errs := make(chan error, burst)
		for i := 0; i < burst; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.readInventory(context.Background(), fmt.Sprintf("rp-%d", i)); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		mu.Lock()
		n := newConns
		mu.Unlock()
		if round == 1 && n != 0 {
			t.Fatalf("the second burst of %d requests opened %d new connections, want 0 (idle connections were closed)", burst, n)
		}
	}
}
