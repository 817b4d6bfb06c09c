package placement

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	gimages "github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// Glance is reached with placement's credentials: a static token goes to
// images.glance.endpoint, which it requires (no catalog without Keystone).
func TestImageClientUsesPlacementCredentials(t *testing.T) {
	t.Parallel()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("X-Auth-Token") + " " + r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "i1", "status": "active"}`))
	}))
	defer srv.Close()
	cfg := Config{Endpoint: "http://placement.invalid", Token: "s3cret"}
	if _, err := ImageClient(t.Context(), cfg, "", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "images.glance.endpoint") {
		t.Fatalf("static token without a Glance endpoint: %v, want an error naming images.glance.endpoint", err)
	}
	sc, err := ImageClient(t.Context(), cfg, srv.URL, func(string) string { return "" })
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
	if _, err := ImageClient(t.Context(), Config{}, srv.URL, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "OS_AUTH_URL") {
		t.Fatalf("no credentials: %v", err)
	}
}
