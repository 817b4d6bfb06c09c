package placement

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
# HELP scour_placement_retries_total Placement requests that failed with a retryable error, by reason: conflict (409 generation conflict) or error (network, timeout, 5xx, 429; not 401/403, which are not retried).
# TYPE scour_placement_retries_total counter
scour_placement_retries_total{reason="conflict"} 0
scour_placement_retries_total{reason="error"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_placement_retries_total"); err != nil {
		t.Error(err)
	}
}

// The service user's password was rotated under scourd: its token
// expires, Placement answers 401, and gophercloud's re-authentication is
// refused. One call must cost one Keystone password attempt, not one per
// retry (Keystone's lockout_failure_attempts would lock the user out),
// and the error says what to fix while staying recoverable for the
// caller, which tries again on its next scan. A 403 (policy) is not
// repeated either.
func TestCredentialAndPolicyRefusalsAreNotRetried(t *testing.T) {
	var expired, rotated, forbidden atomic.Bool
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case expired.Load():
			placementError(401, "")(w, r)
		case forbidden.Load():
			placementError(403, "")(w, r)
		default:
			dirtyDevice(nil)(w, r)
		}
	}}
	ps := startFake(t, f)
	k := &fakeKeystone{placementURL: ps.URL}
	var refused atomic.Int32
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rotated.Load() {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}`)
			return
		}
		k.ServeHTTP(w, r)
	}))
	t.Cleanup(ks.Close)
	env := map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "old", "OS_PROJECT_NAME": "service"}
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	cfg.Retry.Attempts = 8
	c, err := New(context.Background(), cfg, WithGetenv(func(name string) string { return env[name] }), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	dev := Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}
	if _, _, err := c.HasAllocations(context.Background(), dev); err != nil {
		t.Fatal(err)
	}

	expired.Store(true)
	rotated.Store(true)
	_, _, err = c.HasAllocations(context.Background(), dev)
	if n := refused.Load(); n != 1 {
		t.Errorf("one call made %d Keystone password attempts, want 1", n)
	}
	if !errors.Is(err, ErrCredentials) || !IsRecoverable(err) || !strings.Contains(err.Error(), "OS_PASSWORD") {
		t.Errorf("rotated password: %v; want a recoverable ErrCredentials naming OS_PASSWORD", err)
	}

	expired.Store(false)
	forbidden.Store(true)
	before := f.count("GET /resource_providers/d1/allocations")
	_, _, err = c.HasAllocations(context.Background(), dev)
	if n := f.count("GET /resource_providers/d1/allocations") - before; n != 1 {
		t.Errorf("a 403 was sent %d times, want 1", n)
	}
	if !errors.Is(err, ErrForbidden) || !IsRecoverable(err) || !strings.Contains(err.Error(), "service or admin role") {
		t.Errorf("403: %v; want a recoverable ErrForbidden naming the role", err)
	}
}
