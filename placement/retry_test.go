package placement

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Placement answering 500 twice, then 200: the read succeeds, one WARN
// line says 2 attempts failed, and the metric counts both.
func TestRetriedErrorsLoggedOnceAndCounted(t *testing.T) {
	t.Parallel()
	var fails atomic.Int32
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/allocations") && fails.Add(1) <= 2 {
			placementError(500, "placement.undefined_code")(w, r)
			return
		}
		dirtyDevice(nil)(w, r)
	}}
	var logs bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL),
		WithRegisterer(reg), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.HasAllocations(context.Background(), Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}); err != nil {
		t.Fatal(err)
	}
	var warns []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "failed_attempts=2") || !strings.Contains(warns[0], "outcome=succeeded") || !strings.Contains(warns[0], "500") {
		t.Errorf("WARN lines = %q, want one naming 2 failed attempts, the 500 and the outcome", warns)
	}
	want := `
# HELP scour_placement_retries_total Placement requests that failed with a retryable error, by reason: conflict (409 generation conflict) or error (network, timeout, 5xx, 401/403, 429).
# TYPE scour_placement_retries_total counter
scour_placement_retries_total{reason="conflict"} 0
scour_placement_retries_total{reason="error"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_placement_retries_total"); err != nil {
		t.Error(err)
	}
}
