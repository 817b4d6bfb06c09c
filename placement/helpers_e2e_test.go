package placement

// Seeding helpers for the integration tests against a real Placement.
// Kept small on purpose: the e2e harness (e2e/harness) may replace them.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// testEnv is a reachable Placement with an admin token. URL is what scour
// talks to; Backend is Placement itself, for seeding and for assertions.
type testEnv struct {
	URL     string
	Backend string
	Token   string
	P       *harness.Placement // the harness's Nova actions and reads
}

// token is the admin token for the harness's own requests: behind
// Keystone the harness's current one (Token is the one at the start, and
// expires after 3 minutes: a long test outlived it), else the static one.
func (e testEnv) token() string {
	if e.P != nil && e.P.Keystone() != nil {
		return e.P.Token()
	}
	return e.Token
}

// testPlacement returns the Placement the integration tests use: the e2e
// harness's (a shared container, or SCOUR_E2E_PLACEMENT_URL when set, e.g.
// from `scripts/placement-local.sh start`). The harness skips under -short
// and fails, not skips, when no container engine is available: the safety
// properties of this package are only proven against the real thing.
func testPlacement(t testing.TB) testEnv {
	t.Helper()
	p := harness.StartPlacement(t)
	return testEnv{URL: strings.TrimRight(p.URL(), "/"), Backend: strings.TrimRight(p.BackendURL(), "/"), Token: p.Token(), P: p}
}

// seedClient does not reuse connections, so the helpers work against a
// Placement served by uwsgi --http-socket too (it closes every connection).
var seedClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// api is a plain HTTP client for seeding and for reading Placement behind
// scour's back (so assertions do not trust the code under test).
type api struct {
	t   testing.TB
	env testEnv
}

func (a api) call(method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.env.Backend+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", a.env.token())
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	req.Header.Set("Content-Type", "application/json")
	resp, err := seedClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// must calls and fails the test unless the status is one of ok.
func (a api) must(method, path string, body any, out any, ok ...int) {
	a.t.Helper()
	code, b := a.call(method, path, body)
	for _, c := range ok {
		if c == code {
			if out != nil {
				if err := json.Unmarshal(b, out); err != nil {
					a.t.Fatalf("%s %s: %v: %s", method, path, err, b)
				}
			}
			return
		}
	}
	a.t.Fatalf("%s %s: HTTP %d: %s", method, path, code, b)
}

type seedHost struct {
	api
	Node     string
	NodeUUID string
}

// seedNode creates a compute node RP (name contains "_" on purpose: the
// address is split on the LAST one) with VCPU/MEMORY_MB/DISK_GB inventory.
func seedNode(t testing.TB, env testEnv) *seedHost {
	t.Helper()
	return seedNodeNamed(t, env, "cn_"+newUUID()[:8])
}

func seedNodeNamed(t testing.TB, env testEnv, name string) *seedHost {
	t.Helper()
	a := api{t: t, env: env}
	h := &seedHost{api: a, Node: name, NodeUUID: newUUID()}
	a.must("POST", "/resource_providers", map[string]any{"name": h.Node, "uuid": h.NodeUUID}, nil, 200)
	a.must("PUT", "/resource_providers/"+h.NodeUUID+"/inventories", map[string]any{
		"resource_provider_generation": 0,
		"inventories": map[string]any{
			"VCPU": map[string]any{"total": 64}, "MEMORY_MB": map[string]any{"total": 262144},
			"DISK_GB": map[string]any{"total": 1000},
		},
	}, nil, 200)
	t.Cleanup(func() { h.cleanup() })
	return h
}

type devSpec struct {
	Addr        string         // lower or upper case; the RP name gets upper case
	RC          string         // default CUSTOM_PCI_144D_A80A
	Total       int            // default 1
	Reserved    int            // set after Consumer's allocation, as Nova does
	Consumer    string         // when set, allocates the device to it
	Extra       map[string]any // extra inventories (makes it unmanaged)
	Fields      map[string]any // inventory field overrides (max_unit, allocation_ratio...)
	Traits      []string       // default COMPUTE_MANAGED_PCI_DEVICE + HW_PCI_ONE_TIME_USE
	NoOTU       bool
	Quarantined bool
}

// seedDevice creates a child device RP named <node>_<ADDR upper-case> the
// way Nova does, with its inventory and traits.
func (h *seedHost) seedDevice(s devSpec) Ref {
	h.t.Helper()
	if s.RC == "" {
		s.RC = "CUSTOM_PCI_144D_A80A"
	}
	if s.Total == 0 {
		s.Total = 1
	}
	ref := Ref{UUID: newUUID(), Name: h.Node + "_" + strings.ToUpper(s.Addr)}
	ref.Address, _ = parseAddress(ref.Name)
	h.must("PUT", "/resource_classes/"+s.RC, nil, nil, 201, 204)
	h.must("POST", "/resource_providers", map[string]any{"name": ref.Name, "uuid": ref.UUID, "parent_provider_uuid": h.NodeUUID}, nil, 200)
	inv := map[string]any{"total": s.Total, "reserved": 0, "max_unit": s.Total}
	for k, v := range s.Fields {
		inv[k] = v
	}
	invs := map[string]any{s.RC: inv}
	for rc, v := range s.Extra {
		h.must("PUT", "/resource_classes/"+rc, nil, nil, 201, 204)
		invs[rc] = v
	}
	h.must("PUT", "/resource_providers/"+ref.UUID+"/inventories", map[string]any{"resource_provider_generation": 0, "inventories": invs}, nil, 200)
	traits := s.Traits
	if traits == nil {
		traits = []string{"COMPUTE_MANAGED_PCI_DEVICE"}
		if !s.NoOTU {
			traits = append(traits, DefaultOneTimeUseTrait)
		}
	}
	if s.Quarantined {
		traits = append(traits, DefaultQuarantineTrait)
	}
	for _, tr := range traits {
		if isCustom(tr) {
			h.must("PUT", "/traits/"+tr, nil, nil, 201, 204)
		}
	}
	h.must("PUT", "/resource_providers/"+ref.UUID+"/traits", map[string]any{"resource_provider_generation": 1, "traits": traits}, nil, 200)
	if s.Consumer != "" {
		h.allocate(s.Consumer, map[string]map[string]int{ref.UUID: {s.RC: 1}})
	}
	if s.Reserved != 0 {
		h.setReserved(ref, s.RC, s.Reserved)
	}
	return ref
}

// setReserved changes reserved the way Nova does: GET, then PUT every
// field back.
func (h *seedHost) setReserved(dev Ref, rc string, n int) {
	h.t.Helper()
	inv := h.rawInv(dev, rc)
	inv["reserved"] = json.RawMessage(fmt.Sprint(n))
	h.must("PUT", "/resource_providers/"+dev.UUID+"/inventories/"+rc, inv, nil, 200)
}

// allocate makes consumer hold the given RPs (rp uuid -> resources), as
// Nova does at 1.38 (consumer_type required).
func (h *seedHost) allocate(consumer string, res map[string]map[string]int) {
	h.t.Helper()
	allocs := map[string]any{}
	for rp, r := range res {
		allocs[rp] = map[string]any{"resources": r}
	}
	var cur struct {
		Gen *int `json:"consumer_generation"`
	}
	h.must("GET", "/allocations/"+consumer, nil, &cur, 200)
	h.must("PUT", "/allocations/"+consumer, map[string]any{
		"allocations": allocs, "project_id": "p-e2e", "user_id": "u-e2e",
		"consumer_generation": cur.Gen, "consumer_type": "INSTANCE",
	}, nil, 204)
}

// reallocate plays what makes a dirty device allocated again: someone
// returns it (reserved 0), Nova schedules consumer onto it and burns it
// (reserved 1). A dirty device cannot be allocated directly: reserved ==
// total leaves no capacity.
func (h *seedHost) reallocate(consumer string, dev Ref) {
	h.setReserved(dev, "CUSTOM_PCI_144D_A80A", 0)
	h.allocateDevice(consumer, dev)
	h.setReserved(dev, "CUSTOM_PCI_144D_A80A", 1)
}

func (h *seedHost) allocateDevice(consumer string, dev Ref) {
	h.allocate(consumer, map[string]map[string]int{dev.UUID: {"CUSTOM_PCI_144D_A80A": 1}})
}

// rawInv reads a device's inventory of rc as raw JSON fields.
func (h *seedHost) rawInv(dev Ref, rc string) map[string]json.RawMessage {
	h.t.Helper()
	var out map[string]json.RawMessage
	h.must("GET", "/resource_providers/"+dev.UUID+"/inventories/"+rc, nil, &out, 200)
	return out
}

func (h *seedHost) reserved(dev Ref) int {
	h.t.Helper()
	var n int
	_ = json.Unmarshal(h.rawInv(dev, "CUSTOM_PCI_144D_A80A")["reserved"], &n)
	return n
}

func (h *seedHost) traits(dev Ref) []string {
	h.t.Helper()
	var out struct {
		Traits []string `json:"traits"`
	}
	h.must("GET", "/resource_providers/"+dev.UUID+"/traits", nil, &out, 200)
	return out.Traits
}

// cleanup removes the tree: allocations of its consumers, then children,
// then the node.
func (h *seedHost) cleanup() {
	var tree struct {
		Providers []provider `json:"resource_providers"`
	}
	if code, b := h.call("GET", "/resource_providers?in_tree="+h.NodeUUID, nil); code == 200 {
		_ = json.Unmarshal(b, &tree)
	}
	for _, p := range tree.Providers {
		var al struct {
			Allocations map[string]any `json:"allocations"`
		}
		if code, b := h.call("GET", "/resource_providers/"+p.UUID+"/allocations", nil); code == 200 {
			_ = json.Unmarshal(b, &al)
		}
		for consumer := range al.Allocations {
			h.call("DELETE", "/allocations/"+consumer, nil)
		}
	}
	for _, p := range tree.Providers {
		if p.UUID != h.NodeUUID {
			h.call("DELETE", "/resource_providers/"+p.UUID, nil)
		}
	}
	h.call("DELETE", "/resource_providers/"+h.NodeUUID, nil)
}

// newE2EClient is a scour client for the seeded host.
func newE2EClient(t testing.TB, env testEnv, node string, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Endpoint: env.URL, Token: env.Token, Node: node,
		Retry: RetryConfig{Attempts: 10, Base: 5 * time.Millisecond, Max: 200 * time.Millisecond, Budget: 20 * time.Second}}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("placement.New: %v", err)
	}
	return c
}
