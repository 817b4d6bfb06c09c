package placement

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeKeystone issues tok-1, tok-2, ... and serves a catalog whose
// placement endpoint is placementURL.
type fakeKeystone struct {
	placementURL string
	// extra are more catalog entries (JSON objects), after Placement's.
	extra   []string
	mu      sync.Mutex
	issued  int
	methods [][]string
	bodies  []map[string]any // each token request's JSON body
}

func (k *fakeKeystone) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v3/auth/tokens" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Auth struct {
			Identity struct {
				Methods []string `json:"methods"`
			} `json:"identity"`
		} `json:"auth"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &req)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	k.mu.Lock()
	k.bodies = append(k.bodies, body)
	k.issued++
	tok := fmt.Sprintf("tok-%d", k.issued)
	k.methods = append(k.methods, req.Auth.Identity.Methods)
	k.mu.Unlock()
	w.Header().Set("X-Subject-Token", tok)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"token": {"expires_at": %q, "methods": ["password"],
	 "user": {"id": "u1", "name": "scour", "domain": {"id": "default", "name": "Default"}},
	 "catalog": [{"type": "placement", "name": "placement", "id": "p1", "endpoints": [
	   {"id": "e1", "interface": "internal", "region": "RegionOne", "region_id": "RegionOne", "url": %q},
	   {"id": "e2", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": "http://public.invalid"}]}%s]}}`,
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339), k.placementURL, extraEntries(k.extra))
}

func extraEntries(e []string) string {
	if len(e) == 0 {
		return ""
	}
	return ", " + strings.Join(e, ", ")
}

// keystonePlacement rejects tok-1 (expired) except on the version document,
// and serves an empty host otherwise.
func keystonePlacement(t *testing.T) (*fakePlacement, *fakeKeystone, *httptest.Server) {
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") == "tok-1" {
			placementError(401, "")(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/resource_providers") && r.URL.Query().Get("name") != "" {
			io.WriteString(w, `{"resource_providers": [{"uuid": "node-1", "name": "cn_1"}]}`)
			return
		}
		io.WriteString(w, `{"resource_providers": []}`)
	}}
	ps := startFake(t, f)
	k := &fakeKeystone{placementURL: ps.URL}
	ks := httptest.NewServer(k)
	t.Cleanup(ks.Close)
	return f, k, ks
}

func TestCloudsYAMLWithSecureYAMLAndReauth(t *testing.T) {
	f, k, ks := keystonePlacement(t)
	dir := t.TempDir()
	clouds := fmt.Sprintf("clouds:\n  test:\n    auth:\n      auth_url: %s/v3\n      username: scour\n      project_name: service\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n", ks.URL)
	secure := "clouds:\n  test:\n    auth:\n      password: from-secure-yaml\n"
	if err := os.WriteFile(filepath.Join(dir, "clouds.yaml"), []byte(clouds), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secure.yaml"), []byte(secure), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	cfg.Cloud, cfg.CloudsFile = "test", filepath.Join(dir, "clouds.yaml")
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// tok-1 has "expired": the scan's first call gets 401, gophercloud
	// re-authenticates (tok-2) and the scan succeeds.
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatalf("Scan across token expiry: %v", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.issued != 2 {
		t.Errorf("keystone issued %d tokens, want 2 (initial + re-auth)", k.issued)
	}
	if len(k.methods) == 0 || k.methods[0][0] != "password" {
		t.Errorf("auth methods %v, want password (from secure.yaml)", k.methods)
	}
	if n := f.count("GET /resource_providers"); n < 2 {
		t.Errorf("placement saw %d list calls", n)
	}
}

func TestApplicationCredentialFromEnv(t *testing.T) {
	_, k, ks := keystonePlacement(t)
	for _, v := range []string{"OS_CLOUD", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_REGION_NAME", "OS_CLIENT_CONFIG_FILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("OS_AUTH_URL", ks.URL+"/v3")
	t.Setenv("OS_APPLICATION_CREDENTIAL_ID", "ac-id")
	t.Setenv("OS_APPLICATION_CREDENTIAL_SECRET", "ac-secret")
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.methods) == 0 || k.methods[0][0] != "application_credential" {
		t.Errorf("auth methods %v, want application_credential", k.methods)
	}
}

// scourctl hands New scourd's environment file as getenv: the credentials
// come from there, not from the process's environment, and EnvVars names
// every variable read (scourctl compares exactly those with the shell).
func TestCredentialsFromGetenv(t *testing.T) {
	_, k, ks := keystonePlacement(t)
	clearOSEnv(t)
	file := map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"}
	read := map[string]bool{}
	getenv := func(name string) string { read[name] = true; return file[name] }
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	c, err := New(context.Background(), cfg, WithGetenv(getenv))
	if err != nil {
		t.Fatalf("New with the credentials in getenv only: %v", err)
	}
	if _, err := c.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	if k.issued == 0 {
		t.Error("keystone issued no token")
	}
	k.mu.Unlock()
	listed := map[string]bool{}
	for _, n := range EnvVars {
		listed[n] = true
	}
	for n := range read {
		if !listed[n] {
			t.Errorf("%s is read but not in EnvVars", n)
		}
	}
}

// The catalog interface: placement.interface when set, else OS_INTERFACE,
// else the clouds.yaml entry's, else internal. A default of internal
// passed as an override used to hide the operator's interface: public.
func TestEndpointInterfacePrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "clouds.yaml")
	body := "clouds:\n  pub:\n    interface: public\n    auth: {auth_url: http://ks.invalid/v3, username: scour, password: pw, project_name: service}\n" +
		"  plain:\n    auth: {auth_url: http://ks.invalid/v3, username: scour, password: pw, project_name: service}\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	openrc := map[string]string{"OS_AUTH_URL": "http://ks.invalid/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"}
	for _, tc := range []struct {
		name, cfgIface, cloud string
		env                   map[string]string
		want                  string
	}{
		{name: "clouds.yaml interface", cloud: "pub", want: "public"},
		{name: "clouds.yaml without one", cloud: "plain", want: "internal"},
		{name: "OS_INTERFACE over clouds.yaml", cloud: "pub", env: map[string]string{"OS_INTERFACE": "admin"}, want: "admin"},
		{name: "config over clouds.yaml", cfgIface: "internal", cloud: "pub", want: "internal"},
		{name: "openrc OS_INTERFACE", env: map[string]string{"OS_INTERFACE": "public"}, want: "public"},
		{name: "openrc OS_ENDPOINT_TYPE", env: map[string]string{"OS_ENDPOINT_TYPE": "publicURL"}, want: "public"},
		{name: "openrc without one", want: "internal"},
		{name: "config over OS_INTERFACE", cfgIface: "admin", env: map[string]string{"OS_INTERFACE": "public"}, want: "admin"},
	} {
		cfg := Config{Node: "cn_1", Cloud: tc.cloud, Interface: tc.cfgIface}
		if tc.cloud != "" {
			cfg.CloudsFile = file
		}
		cfg.setDefaults()
		env := map[string]string{}
		if tc.cloud == "" {
			for k, v := range openrc {
				env[k] = v
			}
		}
		for k, v := range tc.env {
			env[k] = v
		}
		var tlsCfg *tls.Config
		_, eo, err := keystoneOptions(cfg, &tlsCfg, func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(eo.Availability) != tc.want {
			t.Errorf("%s: interface %q, want %q", tc.name, eo.Availability, tc.want)
		}
	}
}
