package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// clearOSEnv unsets every OS_* variable of the test's environment.
func clearOSEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// Each form of credentials an operator has (openrc variants, application
// credentials, clouds.yaml) authenticates against the Keystone stand-in
// with the token request body the openstack CLI would send, and the
// client then reaches Placement through the catalog.
func TestKeystoneCredentialForms(t *testing.T) {
	const (
		pw  = `"password": "pw"`
		sec = `"secret": "s3"`
	)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		clouds string // clouds.yaml body of cloud "c" (OS_CLOUD=c)
		want   string // the request's "auth" object
	}{
		{name: "openrc with user and project domain names",
			env: map[string]string{"OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service",
				"OS_USER_DOMAIN_NAME": "Users", "OS_PROJECT_DOMAIN_NAME": "Projects", "OS_IDENTITY_API_VERSION": "3"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"name": "Users"}}}},
			        "scope": {"project": {"name": "service", "domain": {"name": "Projects"}}}}`},
		{name: "openrc with domain ids",
			env: map[string]string{"OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service",
				"OS_USER_DOMAIN_ID": "d-u", "OS_PROJECT_DOMAIN_ID": "d-p"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"id": "d-u"}}}},
			        "scope": {"project": {"name": "service", "domain": {"id": "d-p"}}}}`},
		{name: "openrc with user and project ids",
			env: map[string]string{"OS_USER_ID": "u-1", "OS_PASSWORD": "pw", "OS_PROJECT_ID": "p-1"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"id": "u-1", ` + pw + `}}},
			        "scope": {"project": {"id": "p-1"}}}`},
		{name: "openrc without domains uses the default domain",
			env: map[string]string{"OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"id": "default"}}}},
			        "scope": {"project": {"name": "service", "domain": {"id": "default"}}}}`},
		{name: "OS_DEFAULT_DOMAIN",
			env: map[string]string{"OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service", "OS_DEFAULT_DOMAIN": "d-42"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"id": "d-42"}}}},
			        "scope": {"project": {"name": "service", "domain": {"id": "d-42"}}}}`},
		{name: "old openrc: OS_TENANT_NAME and OS_DOMAIN_NAME",
			env: map[string]string{"OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_TENANT_NAME": "service", "OS_DOMAIN_NAME": "Default"},
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"name": "Default"}}}},
			        "scope": {"project": {"name": "service", "domain": {"name": "Default"}}}}`},
		{name: "application credential id (a leftover OS_PROJECT_NAME is not sent)",
			env: map[string]string{"OS_AUTH_TYPE": "v3applicationcredential", "OS_APPLICATION_CREDENTIAL_ID": "ac-1",
				"OS_APPLICATION_CREDENTIAL_SECRET": "s3", "OS_PROJECT_NAME": "service"},
			want: `{"identity": {"methods": ["application_credential"], "application_credential": {"id": "ac-1", ` + sec + `}}}`},
		{name: "application credential name with its user",
			env: map[string]string{"OS_APPLICATION_CREDENTIAL_NAME": "scour-ac", "OS_APPLICATION_CREDENTIAL_SECRET": "s3",
				"OS_USERNAME": "scour", "OS_USER_DOMAIN_NAME": "Users"},
			want: `{"identity": {"methods": ["application_credential"], "application_credential": {"name": "scour-ac", ` + sec + `,
			        "user": {"name": "scour", "domain": {"name": "Users"}}}}}`},
		{name: "clouds.yaml (OS_CLOUD) with domain names",
			clouds: "auth: {auth_url: AUTH, username: scour, password: pw, project_name: service, user_domain_name: Users, project_domain_name: Projects}",
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"name": "Users"}}}},
			        "scope": {"project": {"name": "service", "domain": {"name": "Projects"}}}}`},
		{name: "clouds.yaml without domains uses the default domain",
			clouds: "auth: {auth_url: AUTH, username: scour, password: pw, project_name: service}",
			want: `{"identity": {"methods": ["password"], "password": {"user": {"name": "scour", ` + pw + `, "domain": {"id": "default"}}}},
			        "scope": {"project": {"name": "service", "domain": {"id": "default"}}}}`},
		{name: "clouds.yaml application credential",
			clouds: "auth_type: v3applicationcredential\n    auth: {auth_url: AUTH, application_credential_id: ac-1, application_credential_secret: s3}",
			want:   `{"identity": {"methods": ["application_credential"], "application_credential": {"id": "ac-1", ` + sec + `}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, k, ks := keystonePlacement(t)
			clearOSEnv(t)
			t.Setenv("OS_AUTH_URL", ks.URL+"/v3")
			for key, v := range tc.env {
				t.Setenv(key, v)
			}
			cfg := unitConfig("")
			cfg.Endpoint, cfg.Token = "", ""
			if tc.clouds != "" {
				os.Unsetenv("OS_AUTH_URL")
				dir := t.TempDir()
				body := "clouds:\n  c:\n    " + strings.ReplaceAll(tc.clouds, "AUTH", ks.URL+"/v3") + "\n"
				if err := os.WriteFile(filepath.Join(dir, "clouds.yaml"), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				t.Setenv("OS_CLOUD", "c")
				t.Setenv("OS_CLIENT_CONFIG_FILE", filepath.Join(dir, "clouds.yaml"))
			}
			c, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if _, err := c.Scan(context.Background()); err != nil {
				t.Fatalf("Scan with the catalog's Placement: %v", err)
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatalf("bad expectation: %v", err)
			}
			if len(k.bodies) == 0 {
				t.Fatal("Keystone got no token request")
			}
			if d := cmp.Diff(want, k.bodies[0]["auth"]); d != "" {
				t.Errorf("token request body (-want +got):\n%s", d)
			}
		})
	}
}

// Incomplete credentials are refused before any request, naming what to set.
func TestKeystoneCredentialErrors(t *testing.T) {
	clearOSEnv(t)
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "OS_AUTH_URL") {
		t.Fatalf("no credentials at all: %v; want an error naming OS_AUTH_URL", err)
	}
	t.Setenv("OS_AUTH_URL", "http://127.0.0.1:1/v3")
	t.Setenv("OS_INSECURE", "maybe")
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "OS_INSECURE") {
		t.Fatalf("OS_INSECURE=maybe: %v", err)
	}
	t.Setenv("OS_INSECURE", "")
	t.Setenv("OS_CLOUD", "nope")
	t.Setenv("OS_CLIENT_CONFIG_FILE", filepath.Join(t.TempDir(), "clouds.yaml"))
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("clouds.yaml cloud %q", "nope")) {
		t.Fatalf("OS_CLOUD without a clouds.yaml: %v", err)
	}
}

// Keystone answers 404 "Could not find token" to an expired or revoked
// OS_TOKEN: that is a refused token, named as such, not a wrong
// OS_AUTH_URL, which is a 404 that is no Keystone error document.
func TestLogin404(t *testing.T) {
	t.Parallel()
	keystoneAnswer := func(body string) string {
		ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, body)
		}))
		t.Cleanup(ks.Close)
		return ks.URL + "/v3"
	}
	expired := keystoneAnswer(`{"error": {"code": 404, "message": "Could not find token: gAAAA.", "title": "Not Found"}}`)
	notKeystone := keystoneAnswer(`<html>404 Not Found</html>`)
	for _, tc := range []struct {
		name string
		env  map[string]string
		says string
	}{
		{"expired OS_TOKEN", map[string]string{"OS_AUTH_URL": expired, "OS_TOKEN": "gAAAA", "OS_PROJECT_ID": "p1"}, "OS_TOKEN in the OS_* variables: the token may have expired or been revoked"},
		{"not Keystone, token", map[string]string{"OS_AUTH_URL": notKeystone, "OS_TOKEN": "gAAAA", "OS_PROJECT_ID": "p1"}, "no Keystone v3 at"},
		{"not Keystone, password", map[string]string{"OS_AUTH_URL": notKeystone, "OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"}, "no Keystone v3 at"},
	} {
		cfg := unitConfig("")
		cfg.Endpoint, cfg.Token = "", ""
		_, err := New(context.Background(), cfg, WithGetenv(func(k string) string { return tc.env[k] }))
		if !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want ErrCredentials saying %q", tc.name, err, tc.says)
		}
	}
}
