package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/internal/testkit"
)

// traitTable is a fake Placement's trait table: listings filtering on an
// unknown trait and trait writes carrying one get Placement 8.0.0's 400s.
type traitTable struct {
	mu     sync.Mutex
	known  map[string]bool
	traits []string // the one device's traits
	gen    int
}

func newTraitTable(known ...string) *traitTable {
	t := &traitTable{known: map[string]bool{}}
	for _, k := range known {
		t.known[k] = true
	}
	return t
}

// wipe is Placement's database rebuilt: only standard traits are left
// (placement-manage db sync adds them), and the device's traits are gone.
func (t *traitTable) wipe(standard ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.known)
	for _, s := range standard {
		t.known[s] = true
	}
	t.traits = nil
}

func (t *traitTable) add(name string) {
	t.mu.Lock()
	t.known[name] = true
	t.mu.Unlock()
}

func (t *traitTable) unknown(names []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, n := range names {
		if n = strings.TrimPrefix(n, "!"); n != "" && !t.known[n] {
			out = append(out, n)
		}
	}
	return out
}

func badRequest(w http.ResponseWriter, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]any{"errors": []map[string]any{{"status": 400, "title": "Bad Request",
		"detail": "The server could not comply with the request since it is either malformed or otherwise incorrect.\n\n " + detail + "  ",
		"code":   "placement.undefined_code"}}})
	w.Write(b)
}

// handler serves node lookup, listings (no devices) and the traits of
// device d1 as Placement 8.0.0 does.
func (t *traitTable) handler(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case q.Get("name") != "":
		io.WriteString(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
	case r.URL.Path == "/resource_providers":
		if miss := t.unknown(strings.Split(q.Get("required"), ",")); len(miss) > 0 {
			badRequest(w, fmt.Sprintf(`Invalid trait(s) in "required" parameter: No such trait(s): %s.`, strings.Join(miss, ", ")))
			return
		}
		io.WriteString(w, `{"resource_providers": []}`)
	case r.URL.Path == "/resource_providers/d1/traits" && r.Method == http.MethodGet:
		t.mu.Lock()
		b, _ := json.Marshal(map[string]any{"resource_provider_generation": t.gen, "traits": append([]string{}, t.traits...)})
		t.mu.Unlock()
		w.Write(b)
	case r.URL.Path == "/resource_providers/d1/traits" && r.Method == http.MethodPut:
		var body struct {
			Traits []string `json:"traits"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if miss := t.unknown(body.Traits); len(miss) > 0 {
			badRequest(w, "No such trait "+strings.Join(miss, ", "))
			return
		}
		t.mu.Lock()
		t.traits, t.gen = body.Traits, t.gen+1
		t.mu.Unlock()
		io.WriteString(w, `{}`)
	case strings.HasSuffix(r.URL.Path, "/inventories"):
		io.WriteString(w, `{"resource_provider_generation": 0, "inventories": {"CUSTOM_PCI_144D_A80A": {"total": 1, "reserved": 1, "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0}}}`)
	default:
		http.NotFound(w, r)
	}
}

// Placement's database rebuilt under a running scour: the quarantine
// trait scour created at start is gone. Scans (which filter on it) and
// quarantines (which write it) create it again, count and log it, and
// succeed, instead of failing with HTTP 400 until scour is restarted.
func TestMissingQuarantineTraitIsCreatedAgain(t *testing.T) {
	t.Parallel()
	table := newTraitTable(DefaultOneTimeUseTrait)
	f := &fakePlacement{handle: table.handler, putTrait: table.add}
	reg := prometheus.NewPedanticRegistry()
	var logs testkit.SyncBuffer
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL), WithRegisterer(reg), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatalf("scan before the rebuild: %v", err)
	}

	table.wipe(DefaultOneTimeUseTrait)
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatalf("scan after Placement's database was rebuilt: %v", err)
	}
	if got := f.count("PUT /traits/" + DefaultQuarantineTrait); got != 2 {
		t.Errorf("quarantine trait created %d times, want 2 (at start, again after the rebuild)", got)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "trait="+DefaultQuarantineTrait) ||
		!strings.Contains(out, "setting=placement.quarantine_trait") {
		t.Errorf("no WARN naming the trait and its setting:\n%s", out)
	}

	// Again, now caught by a quarantine's trait write.
	table.wipe(DefaultOneTimeUseTrait)
	dev := Ref{UUID: "d1", Name: "cn_1_0000:81:00.0", Address: "0000:81:00.0"}
	if err := c.Quarantine(context.Background(), dev, "test"); err != nil {
		t.Fatalf("quarantine after Placement's database was rebuilt: %v", err)
	}
	table.mu.Lock()
	traits := slices.Clone(table.traits)
	table.mu.Unlock()
	if !slices.Contains(traits, DefaultQuarantineTrait) {
		t.Errorf("device traits %v lack the quarantine trait", traits)
	}
	want := `
# HELP scour_placement_traits_recreated_total CUSTOM_ traits scour created again because Placement answered that they did not exist (its database was rebuilt or restored under a running scour).
# TYPE scour_placement_traits_recreated_total counter
scour_placement_traits_recreated_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_placement_traits_recreated_total"); err != nil {
		t.Error(err)
	}
}

// A standard trait Placement does not know cannot be created: the scan
// fails, and the error names the setting that names that trait (not the
// quarantine trait's).
func TestMissingStandardTraitNamesItsSetting(t *testing.T) {
	t.Parallel()
	table := newTraitTable() // os-traits without HW_PCI_ONE_TIME_USE
	f := &fakePlacement{handle: table.handler, putTrait: table.add}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Scan(context.Background())
	if err == nil {
		t.Fatal("scan succeeded filtering on a trait Placement lacks")
	}
	msg := err.Error()
	if !strings.Contains(msg, "placement.one_time_use_trait") || !strings.Contains(msg, DefaultOneTimeUseTrait) || strings.Contains(msg, "quarantine_trait") {
		t.Errorf("error does not name the one-time-use trait and its setting alone: %v", err)
	}
	if got := f.count("PUT /traits/" + DefaultOneTimeUseTrait); got != 0 {
		t.Errorf("tried to create the standard trait %d times", got)
	}
}
