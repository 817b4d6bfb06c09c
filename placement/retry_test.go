package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	if len(warns) != 1 || !strings.Contains(warns[0], "failed_attempts=2") || !strings.Contains(warns[0], "outcome=succeeded") || !strings.Contains(warns[0], "500") ||
		!strings.Contains(warns[0], "device=cn_1_0000:81:00.0 rp=d1") {
		t.Errorf("WARN lines = %q, want one naming 2 failed attempts, the 500, the outcome and the device", warns)
	}
	want := retriesHelp + `
scour_placement_retries_total{reason="changed"} 0
scour_placement_retries_total{reason="conflict"} 0
scour_placement_retries_total{reason="error"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_placement_retries_total"); err != nil {
		t.Error(err)
	}
}

const retriesHelp = `
# HELP scour_placement_retries_total Placement requests retried, by reason: conflict (a write refused with a 409 generation conflict), changed (a device read again because its generation moved between two successful reads; routine) or error (network, timeout, 5xx, 429; not 401/403, which are not retried).
# TYPE scour_placement_retries_total counter`

// A device whose generation moves between two reads that both succeed
// (Nova allocating, scour publishing its traits) is read again: nothing
// failed, so no WARN "Placement request failed", and it is counted as
// changed, not as a 409 conflict. Likewise the 409 UnreserveSeen expects
// when the device changed since its check is no WARN (it is a conflict,
// logged at INFO with the device).
func TestDeviceChangedBetweenReadsIsNoFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		op                func(*Client) error
		changed, conflict int
		info              string
	}{
		{name: "ReadDevice", changed: 1, op: func(c *Client) error { _, err := c.ReadDevice(context.Background(), unitDev); return err }},
		{name: "Device", changed: 1, op: func(c *Client) error { _, err := c.Device(context.Background(), unitDev); return err }},
		{name: "Unreserve", changed: 1, op: func(c *Client) error { return c.Unreserve(context.Background(), unitDev, nil) }},
		{name: "UnreserveSeen after a change", changed: 1, conflict: 1, info: "re-reading and re-verifying it before the un-reserve",
			op: func(c *Client) error {
				d, err := c.Device(context.Background(), unitDev) // read at 7, 8, 8, then again at 8
				if err != nil {
					return err
				}
				raw := *d.raw
				d.Generation, raw.Generation, d.raw = 7, 7, &raw // as read before the device moved on
				return c.UnreserveSeen(context.Background(), d, nil)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var invReads atomic.Int32
			f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPut:
					// A write at any generation but the current one is refused.
					if b, _ := io.ReadAll(r.Body); !strings.Contains(string(b), `"resource_provider_generation":8`) {
						placementError(409, "placement.concurrent_update")(w, r)
						return
					}
					io.WriteString(w, `{}`)
				case strings.HasSuffix(r.URL.Path, "/inventories"):
					gen := "8"
					if invReads.Add(1) == 1 {
						gen = "7" // the device moves on right after its first inventory read
					}
					io.WriteString(w, strings.Replace(dirtyInventory, ": 7,", ": "+gen+",", 1))
				case strings.HasSuffix(r.URL.Path, "/allocations"):
					io.WriteString(w, `{"resource_provider_generation": 8, "allocations": {}}`)
				case strings.HasSuffix(r.URL.Path, "/traits"):
					io.WriteString(w, `{"resource_provider_generation": 8, "traits": ["HW_PCI_ONE_TIME_USE"]}`)
				default:
					http.NotFound(w, r)
				}
			}}
			var logs bytes.Buffer
			reg := prometheus.NewPedanticRegistry()
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL), WithRegisterer(reg),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.op(c); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("a device that changed between reads logged a WARN:\n%s", logs.String())
			}
			want := "level=DEBUG msg=\"device changed while being read; read again\""
			if tc.info != "" {
				want = tc.info
			}
			if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "rp="+unitDev.UUID) {
				t.Errorf("logs lack %q naming the device:\n%s", want, logs.String())
			}
			exp := fmt.Sprintf("%s\nscour_placement_retries_total{reason=\"changed\"} %d\nscour_placement_retries_total{reason=\"conflict\"} %d\nscour_placement_retries_total{reason=\"error\"} 0\n",
				retriesHelp, tc.changed, tc.conflict)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "scour_placement_retries_total"); err != nil {
				t.Error(err)
			}
		})
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
	if !errors.Is(err, ErrCredentials) || !IsRecoverable(err) || !strings.Contains(err.Error(), "OS_PASSWORD") ||
		!strings.Contains(err.Error(), "check OS_USERNAME") {
		t.Errorf("rotated password: %v; want a recoverable ErrCredentials naming OS_PASSWORD and the user in use", err)
	}

	expired.Store(false)
	forbidden.Store(true)
	c.now = func() time.Time { return time.Now().Add(credentialsCooldown) } // past the refusal's cooldown
	before := f.count("GET /resource_providers/d1/allocations")
	_, _, err = c.HasAllocations(context.Background(), dev)
	if n := f.count("GET /resource_providers/d1/allocations") - before; n != 1 {
		t.Errorf("a 403 was sent %d times, want 1", n)
	}
	if !errors.Is(err, ErrForbidden) || !IsRecoverable(err) || !strings.Contains(err.Error(), "docs/operations.md names") {
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
	f := refusingPlacement(&expired)
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

// Placement refusing a token that Keystone just issued (a token or fernet
// key skew between them) is no failed login: it starts no cooldown, so
// the next call reaches Placement again instead of failing for a minute.
func TestPlacementRefusingAnIssuedTokenStartsNoCooldown(t *testing.T) {
	var skewed, rotated atomic.Bool
	f := refusingPlacement(&skewed)
	var refused atomic.Int32
	cfg, getenv := refusingKeystone(t, startFake(t, f).URL, &rotated, &refused, func() {})
	c, err := New(context.Background(), cfg, WithGetenv(getenv))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	dev := Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}
	skewed.Store(true)
	if _, _, err := c.HasAllocations(context.Background(), dev); !errors.Is(err, ErrCredentials) {
		t.Fatalf("Placement 401 after a successful login: %v; want ErrCredentials", err)
	}
	skewed.Store(false)
	sent := c.Calls()
	if _, _, err := c.HasAllocations(context.Background(), dev); err != nil {
		t.Fatalf("the next call, within a minute: %v; want it sent to Placement (no cooldown: no login was refused)", err)
	}
	if c.Calls() == sent || refused.Load() != 0 {
		t.Errorf("%d requests sent, %d refused logins; want the call sent and no refused login", c.Calls()-sent, refused.Load())
	}
}

// refusingPlacement serves a dirty device, and answers 401 to every
// request while refuse is set (an expired or unknown token).
func refusingPlacement(refuse *atomic.Bool) *fakePlacement {
	return &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			placementError(401, "")(w, r)
			return
		}
		dirtyDevice(nil)(w, r)
	}}
}
