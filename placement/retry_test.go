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
	"time"

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
	var refused atomic.Int32
	cfg, getenv := refusingKeystone(t, startFake(t, f).URL, &rotated, &refused, func() {})
	cfg.Retry.Attempts = 8
	c, err := New(context.Background(), cfg, WithGetenv(getenv), WithLogger(slog.New(slog.DiscardHandler)))
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
	c.now = func() time.Time { return time.Now().Add(credentialsCooldown) } // past the refusal's cooldown
	before := f.count("GET /resource_providers/d1/allocations")
	_, _, err = c.HasAllocations(context.Background(), dev)
	if n := f.count("GET /resource_providers/d1/allocations") - before; n != 1 {
		t.Errorf("a 403 was sent %d times, want 1", n)
	}
	if !errors.Is(err, ErrForbidden) || !IsRecoverable(err) || !strings.Contains(err.Error(), "service or admin role") {
		t.Errorf("403: %v; want a recoverable ErrForbidden naming the role", err)
	}
}

// With a rotated password, every caller keeps calling: each scan, each
// release, the bus retrying a failed command. After Keystone's refusal the
// client fails every call at once for a minute, without a Keystone
// attempt, logs one ERROR and counts the skipped requests; the first call
// after the minute tries Keystone once more, and a fixed Keystone is used
// again without a restart.
func TestCredentialRefusalCoolsDown(t *testing.T) {
	var expired, rotated atomic.Bool
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		if expired.Load() {
			placementError(401, "")(w, r)
			return
		}
		dirtyDevice(nil)(w, r)
	}}
	var refused atomic.Int32
	cfg, getenv := refusingKeystone(t, startFake(t, f).URL, &rotated, &refused, func() { expired.Store(false) })
	var logs bytes.Buffer
	c, err := New(context.Background(), cfg, WithGetenv(getenv), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	dev := Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}
	errorLines := func() int { return strings.Count(logs.String(), "level=ERROR") }

	expired.Store(true)
	rotated.Store(true)
	sent := c.Calls()
	for i := range 5 {
		_, _, err := c.HasAllocations(context.Background(), dev)
		if !errors.Is(err, ErrCredentials) || !IsRecoverable(err) || !strings.Contains(err.Error(), "not retried with Keystone until 2026-11-26T10:01:00Z") {
			t.Errorf("call %d: %v; want a recoverable ErrCredentials saying when Keystone is tried again", i, err)
		}
	}
	if _, err := c.ReadDevice(context.Background(), dev); !errors.Is(err, ErrCredentials) {
		t.Errorf("ReadDevice during the cooldown: %v; want ErrCredentials", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("6 calls within the cooldown made %d Keystone attempts, want 1", n)
	}
	if n := c.Calls() - sent; n != 1 {
		t.Errorf("6 calls within the cooldown sent %d Placement requests, want 1", n)
	}
	if n := errorLines(); n != 1 {
		t.Errorf("%d ERROR lines within the cooldown, want 1:\n%s", n, logs.String())
	}
	if got := testutil.ToFloat64(c.metrics.skipped); got != 6 { // 4 allocation reads, ReadDevice's 2 reads
		t.Errorf("scour_placement_requests_skipped_total = %v, want 6", got)
	}

	now = now.Add(credentialsCooldown)
	if _, _, err := c.HasAllocations(context.Background(), dev); !errors.Is(err, ErrCredentials) {
		t.Errorf("first call after the cooldown: %v; want ErrCredentials", err)
	}
	if n := refused.Load(); n != 2 {
		t.Errorf("the first call after the cooldown made %d Keystone attempts in all, want 2", n)
	}
	if n := errorLines(); n != 2 {
		t.Errorf("%d ERROR lines after a second cooldown started, want 2", n)
	}

	// The operator unlocks the user or sets the password back: the next
	// call after the cooldown logs in and succeeds.
	rotated.Store(false)
	now = now.Add(credentialsCooldown)
	if _, _, err := c.HasAllocations(context.Background(), dev); err != nil {
		t.Errorf("after Keystone was fixed: %v", err)
	}
}

// refusingKeystone starts a Keystone stand-in whose catalog names
// placementURL and that refuses every token request with a 401 while
// rotated is set (counting them in refused), and calls issued before each
// token it issues. It returns a Keystone config and the OS_* of an openrc
// for it.
func refusingKeystone(t *testing.T, placementURL string, rotated *atomic.Bool, refused *atomic.Int32, issued func()) (Config, func(string) string) {
	k := &fakeKeystone{placementURL: placementURL}
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rotated.Load() {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}`)
			return
		}
		issued()
		k.ServeHTTP(w, r)
	}))
	t.Cleanup(ks.Close)
	env := map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "old", "OS_PROJECT_NAME": "service"}
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	return cfg, func(name string) string { return env[name] }
}
