package images

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Glance's policy refusing scour (HTTP 403, as Glance 25 answers a reader
// token's download under secure RBAC, or a token without reader's list)
// is a refusal naming the policy rule and the role to grant, tried once
// (a retry gets the same answer): never "unavailable".
func TestGlanceForbiddenNamesThePermission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, refuse, rule, role string
		ref                      Ref
	}{
		{"download by id", "/file", "download_image", "member", Ref{ID: "i1"}},
		{"read by id", "/v2/images/i1", "get_image", "reader", Ref{ID: "i1"}},
		{"list for a query", "/v2/images", "get_images", "reader", goldenQuery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeGlance{images: []map[string]any{glanceImage("i1", "op", "active")}}
			var refused atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == tc.refuse || strings.HasSuffix(r.URL.Path, tc.refuse) && tc.refuse == "/file" {
					refused.Add(1)
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(http.StatusForbidden)
					_, _ = w.Write([]byte("403 Forbidden\n\nYou are not authorized to complete " + tc.rule + " action.\n"))
					return
				}
				f.ServeHTTP(w, r)
			}))
			defer srv.Close()
			c, err := OpenCache(t.TempDir(), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			g := NewGlance(StaticClient(EndpointClient(srv.URL, "tok", http.Client{})), c, GlanceConfig{Owners: []string{"op"}, Attempts: 3, Backoff: 1, AllowInsecureImages: true}, nil, nil)
			_, err = g.Fetch(t.Context(), tc.ref)
			if ReasonOf(err) != ReasonForbidden || !strings.Contains(err.Error(), tc.rule+" permission") ||
				!strings.Contains(err.Error(), "the "+tc.role+" role") || !strings.Contains(err.Error(), "stays reserved") {
				t.Fatalf("Fetch: %v (reason %q); want forbidden, naming %s and the %s role", err, ReasonOf(err), tc.rule, tc.role)
			}
			if n := refused.Load(); n != 1 {
				t.Errorf("Glance refused %d requests, want 1: a 403 is not retried", n)
			}
		})
	}
}
