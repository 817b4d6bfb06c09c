package placement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gimages "github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// A client without Placement's (NewServiceClient) reaches Glance with
// placement's credentials: a static token goes to the endpoint given,
// which it requires (no catalog without Keystone).
func TestNewServiceClientUsesPlacementCredentials(t *testing.T) {
	t.Parallel()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("X-Auth-Token") + " " + r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "i1", "status": "active"}`))
	}))
	defer srv.Close()
	cfg := Config{Endpoint: "http://placement.invalid", Token: "s3cret"}
	if _, err := NewServiceClient(t.Context(), cfg, "image", "", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "images.glance.endpoint") {
		t.Fatalf("static token without a Glance endpoint: %v, want an error naming images.glance.endpoint", err)
	}
	sc, err := NewServiceClient(t.Context(), cfg, "image", srv.URL, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gimages.Get(t.Context(), sc, "i1").Extract(); err != nil {
		t.Fatal(err)
	}
	if got != "s3cret /v2/images/i1" {
		t.Fatalf("Glance saw %q, want the placement token on /v2/images/i1", got)
	}
	// Keystone credentials missing entirely: the same error as Placement's.
	if _, err := NewServiceClient(t.Context(), Config{}, "image", srv.URL, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "OS_AUTH_URL") {
		t.Fatalf("no credentials: %v", err)
	}
}

// tokenRecorder answers every request 200 with body and records the
// token of each.
type tokenRecorder struct {
	mu     sync.Mutex
	tokens []string
	body   string
}

func (r *tokenRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.tokens = append(r.tokens, req.Header.Get("X-Auth-Token")+" "+req.URL.Path)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(r.body))
}

// Glance and Cyborg are reached on Placement's own Keystone session: the
// token Placement re-authenticated to is the one they get, with no login
// of their own, at the catalog's endpoints for Placement's interface
// (internal, not the public one beside it); an explicit endpoint wins
// over the catalog; a catalog without the service says which entry is
// missing and which setting overrides it.
func TestServiceClientSharesPlacementSession(t *testing.T) {
	glance := &tokenRecorder{body: `{"id": "i1", "status": "active"}`}
	gs := httptest.NewServer(glance)
	defer gs.Close()
	_, k, ks := keystonePlacement(t)
	k.extra = []string{fmt.Sprintf(`{"type": "image", "name": "glance", "id": "g1", "endpoints": [
	   {"id": "g-i", "interface": "internal", "region": "RegionOne", "region_id": "RegionOne", "url": %q},
	   {"id": "g-p", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": "http://glance-public.invalid"}]}`, gs.URL)}
	clearOSEnv(t)
	for key, v := range map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"} {
		t.Setenv(key, v)
	}
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// tok-1 is refused by Placement: the scan re-authenticates (tok-2).
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc, err := c.ServiceClient("image", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gimages.Get(t.Context(), sc, "i1").Extract(); err != nil {
		t.Fatalf("GET the image at the catalog's internal Glance endpoint: %v", err)
	}
	k.mu.Lock()
	issued := k.issued
	k.mu.Unlock()
	if issued != 2 || len(glance.tokens) != 1 || glance.tokens[0] != "tok-2 /v2/images/i1" {
		t.Fatalf("Keystone issued %d tokens, Glance saw %v; want 2 (Placement's and its re-authentication) and Glance getting tok-2 on /v2/images/i1", issued, glance.tokens)
	}

	// The operator's endpoint wins over the catalog.
	other := &tokenRecorder{body: `{"id": "i1", "status": "active"}`}
	ov := httptest.NewServer(other)
	defer ov.Close()
	if sc, err = c.ServiceClient("image", ov.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := gimages.Get(t.Context(), sc, "i1").Extract(); err != nil || len(other.tokens) != 1 || len(glance.tokens) != 1 {
		t.Fatalf("images.glance.endpoint set: err %v, it saw %v and the catalog's saw %v; want the override only", err, other.tokens, glance.tokens)
	}

	// No accelerator service in the catalog.
	_, err = c.ServiceClient("accelerator", "")
	if err == nil || !strings.Contains(err.Error(), "no service of type accelerator") || !strings.Contains(err.Error(), "placement.cyborg.endpoint") {
		t.Fatalf("catalog without Cyborg: %v; want an error naming the accelerator entry and placement.cyborg.endpoint", err)
	}
}

// With a static token there is no catalog: the service's endpoint setting
// is required and named.
func TestServiceClientStaticTokenNeedsEndpoint(t *testing.T) {
	f := &fakePlacement{}
	ps := startFake(t, f)
	cfg := unitConfig(ps.URL)
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ServiceClient("image", ""); err == nil || !strings.Contains(err.Error(), "images.glance.endpoint") {
		t.Fatalf("static token, no Glance endpoint: %v; want an error naming images.glance.endpoint", err)
	}
	sc, err := c.ServiceClient("accelerator", "http://cyborg.example/accelerator/v2")
	if err != nil || sc.Endpoint != "http://cyborg.example/accelerator/v2/" || sc.TokenID != cfg.Token {
		t.Fatalf("static token with a Cyborg endpoint: %+v, %v", sc, err)
	}
}

// Glance and Cyborg share Placement's Keystone session, so they honour
// its credential cooldown: once Keystone refused a login that a Glance
// call started, Glance, Cyborg and Placement calls within the cooldown
// fail at once with a recoverable ErrCredentials, sending nothing and
// making no login Keystone's lockout would count; after the cooldown a
// fixed Keystone is used again by all of them.
func TestServiceClientsHonourCredentialCooldown(t *testing.T) {
	var expired, rotated atomic.Bool
	var refused atomic.Int32
	var sent atomic.Int32 // requests Glance and Cyborg received
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if expired.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if strings.Contains(r.URL.Path, "accelerator_requests") {
			io.WriteString(w, `{"arqs": []}`)
			return
		}
		io.WriteString(w, `{"id": "i1", "status": "active"}`)
	}))
	defer svc.Close()
	f := refusingPlacement(&expired)
	cfg, getenv := refusingKeystone(t, startFake(t, f).URL, &rotated, &refused, func() { expired.Store(false) })
	c, err := New(context.Background(), cfg, WithGetenv(getenv), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	glance, err := c.ServiceClient("image", svc.URL)
	if err != nil {
		t.Fatal(err)
	}
	cyborg, err := c.ServiceClient("accelerator", svc.URL+"/accelerator/v2")
	if err != nil {
		t.Fatal(err)
	}
	getImage := func() error { _, err := gimages.Get(t.Context(), glance, "i1").Extract(); return err }
	listARQs := func() error {
		_, err := cyborg.Get(t.Context(), cyborg.Endpoint+"accelerator_requests?instance=vm-1", &struct{}{}, nil)
		return err
	}

	expired.Store(true)
	rotated.Store(true)
	if err := getImage(); err == nil || refused.Load() != 1 {
		t.Fatalf("Glance call with a rotated password: %v, %d logins refused; want an error after 1", err, refused.Load())
	}
	sentBefore := sent.Load()
	for i := range 5 {
		for what, call := range map[string]func() error{"Glance image read": getImage, "Cyborg ARQ read": listARQs} {
			if err := call(); !errors.Is(err, ErrCredentials) || !IsRecoverable(err) || !strings.Contains(err.Error(), "not retried with Keystone until 2026-11-26T10:01:00Z") {
				t.Errorf("%s %d within the cooldown: %v; want a recoverable ErrCredentials saying when Keystone is tried again", what, i, err)
			}
		}
	}
	if _, _, err := c.HasAllocations(context.Background(), Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}); !errors.Is(err, ErrCredentials) {
		t.Errorf("Placement call within the cooldown Glance's refusal started: %v; want ErrCredentials", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("11 calls within the cooldown made %d Keystone logins in all, want 1 (the refused one)", n)
	}
	if n := sent.Load() - sentBefore; n != 0 {
		t.Errorf("10 Glance/Cyborg calls within the cooldown sent %d requests, want 0", n)
	}

	// Keystone fixed, cooldown over: one login, and every service works.
	rotated.Store(false)
	now = now.Add(credentialsCooldown)
	if err := listARQs(); err != nil {
		t.Errorf("Cyborg after the cooldown, Keystone fixed: %v", err)
	}
	if err := getImage(); err != nil {
		t.Errorf("Glance after the cooldown, Keystone fixed: %v", err)
	}
	if _, _, err := c.HasAllocations(context.Background(), Ref{UUID: "d1", Name: "cn_1_0000:81:00.0"}); err != nil {
		t.Errorf("Placement after the cooldown, Keystone fixed: %v", err)
	}
}

// A service client on Placement's Keystone session says, through the
// session's own transport wrapper (Unwrap), which TLS settings it uses:
// the images package refuses Glance images when certificate
// verification is off (placement.insecure), and must see that through
// the wrapper.
func TestServiceClientShowsItsTLSSettings(t *testing.T) {
	t.Parallel()
	for _, insecure := range []bool{false, true} {
		var rotated atomic.Bool
		var refused atomic.Int32
		cfg, getenv := refusingKeystone(t, startFake(t, &fakePlacement{}).URL, &rotated, &refused, func() {})
		cfg.Insecure = insecure
		c, err := New(context.Background(), cfg, WithGetenv(getenv), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		sc, err := c.ServiceClient("image", "https://glance.example:9292")
		if err != nil {
			t.Fatal(err)
		}
		rt := sc.ProviderClient.HTTPClient.Transport
		w, ok := rt.(interface{ Unwrap() http.RoundTripper })
		if !ok {
			t.Fatalf("the session's transport %T does not say what it wraps", rt)
		}
		tr, ok := w.Unwrap().(*http.Transport)
		if !ok {
			t.Fatalf("unwrapped %T, want *http.Transport", w.Unwrap())
		}
		if got := tr.TLSClientConfig != nil && tr.TLSClientConfig.InsecureSkipVerify; got != insecure {
			t.Errorf("placement.insecure %v: the Glance client skips verification: %v", insecure, got)
		}
	}
}
