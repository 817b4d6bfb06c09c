package cyborg_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/cyborg/cyborgtest"
	"github.com/scour-project/scour/placement"
)

// The stand-in behind Keystone validates each token as keystonemiddleware
// does (the service user's token, the subject token; Keystone's 404 for a
// revoked one): the client's valid token reads the ARQs and the request
// records whose it was; a revoked one is refused 401 before any ARQ is
// read; a wrong service password is a 503, not an accepted token.
func TestStandInBehindKeystoneValidatesTokens(t *testing.T) {
	var validated []string
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v3/auth/tokens":
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			b, _ := json.Marshal(body)
			if !strings.Contains(string(b), `"password":"cyborg"`) {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("X-Subject-Token", "svc")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"token": {"expires_at": "` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v3/auth/tokens" && r.Header.Get("X-Auth-Token") == "svc":
			validated = append(validated, r.Header.Get("X-Subject-Token"))
			if r.Header.Get("X-Subject-Token") != "good" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			_, _ = w.Write([]byte(`{"token": {"user": {"id": "u-scour"}, "project": {"id": "p-svc"}, "roles": [{"name": "scour"}]}}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer ks.Close()
	for _, tc := range []struct {
		token, password string
		wantErr         string
	}{
		{"good", "cyborg", ""},
		{"revoked", "cyborg", "401"},
		{"good", "wrong", "503"},
	} {
		s := cyborgtest.StartBehindKeystone(cyborgtest.Keystone{URL: ks.URL + "/v3", User: "cyborg", Password: tc.password, ProjectName: "service"})
		s.Bind(cyborgtest.ARQ{UUID: "a1", State: "Bound", Instance: inst, AttachType: "PCI", Attach: cyborgtest.PCI("0000:0c:00.0")})
		cfg := placement.Config{Node: "compute1", Endpoint: "http://placement.invalid:8778", Token: tc.token}
		c := cyborg.New(func(ctx context.Context) (*gophercloud.ServiceClient, error) {
			return placement.NewServiceClient(ctx, cfg, cyborg.ServiceType, s.Endpoint(), nil)
		}, 0)
		arqs, err := c.InstanceARQs(context.Background(), inst)
		s.Close()
		reqs := s.Requests()
		if tc.wantErr == "" {
			if err != nil || len(arqs) != 1 || len(reqs) != 1 || reqs[0].Auth.UserID != "u-scour" || reqs[0].Auth.Roles[0] != "scour" {
				t.Errorf("token %s: %v, %d ARQs, requests %+v; want the ARQ, validated as u-scour", tc.token, err, len(arqs), reqs)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || len(arqs) != 0 {
			t.Errorf("token %s, service password %s: %v, %d ARQs; want an error with %s", tc.token, tc.password, err, len(arqs), tc.wantErr)
		}
	}
	if len(validated) != 2 || validated[0] != "good" || validated[1] != "revoked" {
		t.Errorf("Keystone validated %v, want good then revoked (the wrong service password validates nothing)", validated)
	}
}
