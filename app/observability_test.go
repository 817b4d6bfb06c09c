package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/config"
)

// registeredNames wires a whole scourd (lifecycle on: Placement stand-in,
// simulated hardware, sqlite store) and returns every metric name its
// registry knows, series or not, and the label values of the series it
// exports from the start (name → label → values: the pre-initialised
// label sets).
func registeredNames(t *testing.T) ([]string, map[string]map[string][]string) {
	t.Helper()
	cfg := lifecycleConfig(t, t.TempDir(), "compute")
	a, cleanup, err := New(cfg, slog.New(slog.DiscardHandler), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	mfs, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	initial := map[string]map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if initial[mf.GetName()] == nil {
					initial[mf.GetName()] = map[string][]string{}
				}
				initial[mf.GetName()][lp.GetName()] = append(initial[mf.GetName()][lp.GetName()], lp.GetValue())
			}
		}
	}
	return a.Metrics.Names(), initial
}

// lifecycleConfig is a whole scourd's configuration (Placement stand-in,
// simulated hardware, sqlite store in dir) for host.
func lifecycleConfig(t *testing.T, dir, host string) *config.Config {
	t.Helper()
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/":
			io.WriteString(w, `{"versions": [{"id": "v1.0", "min_version": "1.0", "max_version": "1.39", "status": "CURRENT"}]}`)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusNoContent)
		default:
			io.WriteString(w, `{"resource_providers": []}`)
		}
	}))
	t.Cleanup(ps.Close)
	cfgPath := filepath.Join(dir, "scour.yaml")
	body := `host: ` + host + `
http: {address: "127.0.0.1:0"}
placement: {endpoint: ` + ps.URL + `, token: admin}
claims: {state_path: ` + dir + `}
admin: {socket: ` + filepath.Join(dir, "scourd.sock") + `}
hardware:
  backend: simulated
  simulator: {state_dir: ` + filepath.Join(dir, "sim") + `, devices: [{address: "0000:81:00.0", kind: nvme}]}
pipelines:
  profiles:
    - name: nvme
      match: {kinds: [nvme]}
      pipeline: {name: nvme, steps: [{name: sanitize, type: nvme-sanitize}]}
`
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var (
	metricNameRE = regexp.MustCompile(`\bscour_[a-z0-9_]+`)
	selectorRE   = regexp.MustCompile(`\b(scour_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|=)\s*"([^"]*)"`)
	literalsRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]+(\|[a-zA-Z0-9_-]+)*$`)
)

// checkLabelValues fails for every label value expr selects (label="v",
// or label=~"a|b" of plain values) that scour never exports, where the
// metric's label set is exported from the start: a misspelt value would
// make an alert that can never fire. Labels without series at the start
// (the devices gauge's state, set at each scan) are not checked.
func checkLabelValues(t *testing.T, where, expr string, initial map[string]map[string][]string) {
	t.Helper()
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			known, ok := initial[sel[1]][m[1]]
			if !ok || (m[2] == "=~" && !literalsRE.MatchString(m[3])) {
				continue
			}
			for _, v := range strings.Split(m[3], "|") {
				if !slices.Contains(known, v) {
					t.Errorf("%s selects %s{%s=%q}, which scour does not export (it exports %v)", where, sel[1], m[1], v, known)
				}
			}
		}
	}
}

// checkNames fails for every scour_ metric expr queries that scour does
// not register (a histogram's _bucket, _sum and _count count as it).
func checkNames(t *testing.T, where, expr string, names []string) int {
	t.Helper()
	found := 0
	for _, n := range metricNameRE.FindAllString(expr, -1) {
		found++
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suf); ok && slices.Contains(names, b) {
				base = b
			}
		}
		if !slices.Contains(names, base) {
			t.Errorf("%s queries %s, which scour does not export", where, n)
		}
	}
	return found
}

// The alert rules and the dashboard query only metrics scour exports; the
// dashboard has the panels operators need.
func TestRulesAndDashboardMatchTheRegistry(t *testing.T) {
	names, initial := registeredNames(t)
	for _, want := range []string{"scour_build_info", "scour_lifecycle_devices", "scour_pipeline_step_progress_ratio", "scour_placement_requests_total"} {
		if !slices.Contains(names, want) {
			t.Fatalf("the wired registry lacks %s (names: %v)", want, names)
		}
	}

	raw, err := os.ReadFile("../deploy/prometheus/scour-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n += checkNames(t, "alert "+r.Alert, r.Expr, names)
			checkLabelValues(t, "alert "+r.Alert, r.Expr, initial)
		}
	}
	if n < 8 {
		t.Errorf("the rules query only %d scour metrics", n)
	}

	raw, err = os.ReadFile("../deploy/grafana/scour-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title, UID string
		Panels     []struct {
			Title      string
			Type       string
			GridPos    *struct{ X, Y, W, H int } `json:"gridPos"`
			Datasource *struct{ Type, UID string }
			Targets    []struct{ Expr, RefID string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard without uid or title")
	}
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.Datasource == nil || p.Datasource.Type != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("panel %q lacks a position, the Prometheus datasource or a query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || checkNames(t, "panel "+p.Title, tg.Expr, names) == 0 {
				t.Errorf("panel %q: query %q has no refId or no scour metric", p.Title, tg.Expr)
			}
			checkLabelValues(t, "panel "+p.Title, tg.Expr, initial)
		}
	}
	for _, v := range dash.Templating.List {
		checkNames(t, "variable "+v.Name, v.Definition, names)
	}
	for _, want := range []string{"Devices by state per host", "Cleanings finished", "Quarantine", "Step progress", "Poison queue"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no panel titled like %q in %v", want, titles)
		}
	}
}
