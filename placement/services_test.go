package placement

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
