package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// Keystone is a real Keystone (Debian's python3-keystone 22, Zed: the
// release family of the Placement image) in a container: sqlite, fernet
// tokens, bootstrapped by keystone-manage (admin user, project and role,
// the member and reader roles, RegionOne). StartKeystone adds what every
// OpenStack service behind it needs: the service project and the roles
// scour's tests use. Another service's e2e test registers its catalog
// entries (RegisterService) and its service user (ServiceUser) here and
// points its keystonemiddleware at ContainerURL.
//
// What the system under test uses (URL) goes through a fault proxy of the
// test's own, which also records every token Keystone issues through it
// (Issued), so a test can revoke the token scour holds. The harness's own
// requests (AdminToken, the setup helpers) go to Keystone directly.
type Keystone struct {
	svc     *service
	backend string // http://localhost:<port>, from this process
	inside  string // the same Keystone as other containers reach it
	proxy   *faultProxy
	client  *http.Client

	mu       sync.Mutex
	admin    string
	adminExp time.Time
	issued   []string
}

// Names StartKeystone sets up (Default is keystone-manage's domain).
const (
	KeystoneRegion        = "RegionOne"
	KeystoneAdminPassword = "admin"
	DefaultDomainID       = "default"
	ServiceProject        = "service"
	// DefaultTokenExpiration is the shared Keystone's [token] expiration:
	// short enough that long tests see a token expire and re-authenticate,
	// long enough that a scourd start and a cleaning fit in one token.
	DefaultTokenExpiration = 180 * time.Second
)

// keystonePort is where keystone-start's uwsgi listens in the container.
const keystonePort = "5000/tcp"

// TokenExpiration gives a dedicated Keystone this [token] expiration
// (shared ones use DefaultTokenExpiration).
func TokenExpiration(d time.Duration) Option { return func(o *options) { o.tokenExpiration = d } }

func newKeystone(expiration time.Duration) func() (*service, error) {
	return func() (*service, error) {
		img, err := keystoneImage()
		if err != nil {
			return nil, err
		}
		s := &service{kind: "keystone", image: img, port: keystonePort, ready: keystoneReady,
			desc: fmt.Sprintf("tokens expire after %s", expiration)}
		s.customize = func(req *testcontainers.ContainerRequest) {
			req.Env = map[string]string{
				"KEYSTONE_TOKEN_EXPIRATION": strconv.Itoa(int(expiration.Seconds())),
				// The catalog's identity endpoint is where Placement's
				// keystonemiddleware validates tokens: the host as
				// containers reach it.
				"KEYSTONE_PUBLIC_URL": keystoneContainerURL(s.hostPort),
			}
		}
		return s, nil
	}
}

var keystoneReady = httpReady("/v3")

// keystoneContainerURL is the Keystone published on hostPort as other
// containers reach it: through the host.
func keystoneContainerURL(hostPort int) string {
	return fmt.Sprintf("http://host.containers.internal:%d", hostPort)
}

// StartKeystone returns the package's shared Keystone (started on first
// use; needs harness.Main) or, with Dedicated(), one of the test's own,
// behind a fault proxy of this test's own, with the service project and
// the roles admin, member, reader and scour.
func StartKeystone(t testing.TB, opts ...Option) *Keystone {
	t.Helper()
	skipShort(t)
	o := collect(opts)
	exp := o.tokenExpiration
	if exp == 0 {
		exp = DefaultTokenExpiration
	}
	if !o.dedicated && exp != DefaultTokenExpiration {
		t.Fatalf("e2e harness: TokenExpiration(%s) needs a dedicated Keystone (harness.Dedicated())", exp)
	}
	return keystoneOn(t, acquire(t, newKeystone(exp), "keystone", o.dedicated))
}

// keystoneOn is the test's Keystone on svc (ready): its fault proxy, the
// service project and the roles the tests use.
func keystoneOn(t testing.TB, svc *service) *Keystone {
	t.Helper()
	k := &Keystone{client: &http.Client{Timeout: 30 * time.Second}, svc: svc}
	k.backend = fmt.Sprintf("http://localhost:%d", k.svc.hostPort)
	k.inside = keystoneContainerURL(k.svc.hostPort)
	proxy, err := newFaultProxy(k.backend)
	if err != nil {
		t.Fatalf("e2e harness: proxy to %s: %v", k.backend, err)
	}
	proxy.observe = func(r *http.Response) {
		if tok := r.Header.Get("X-Subject-Token"); tok != "" && r.Request.Method == http.MethodPost && r.StatusCode == http.StatusCreated {
			k.mu.Lock()
			k.issued = append(k.issued, tok)
			k.mu.Unlock()
		}
	}
	t.Cleanup(proxy.close)
	k.proxy = proxy
	k.Project(t, ServiceProject, DefaultDomainID)
	k.Role(t, "scour")
	return k
}

// URL is Keystone's identity endpoint for the system under test (through
// the proxy), with its /v3: OS_AUTH_URL.
func (k *Keystone) URL() string { return k.proxy.srv.URL + "/v3" }

// BackendURL is Keystone itself (/v3), bypassing the proxy.
func (k *Keystone) BackendURL() string { return k.backend + "/v3" }

// ContainerURL is Keystone as another container reaches it (a service's
// keystonemiddleware auth_url), without /v3.
func (k *Keystone) ContainerURL() string { return k.inside }

// Inject makes the proxy apply f to the following requests to URL.
func (k *Keystone) Inject(f Fault) { k.proxy.set(f) }

// Fail makes every request to URL answer status (e.g. 503) until Heal:
// Keystone down, for its clients (Placement still reaches it).
func (k *Keystone) Fail(status int) { k.Inject(Fault{Status: status}) }

// Heal ends any injected fault.
func (k *Keystone) Heal() { k.Inject(Fault{}) }

// Requests counts requests that reached the proxy, and of those the ones a
// fault applied to.
func (k *Keystone) Requests() (total, faulted int64) {
	return k.proxy.requests.Load(), k.proxy.faulted.Load()
}

// Issued returns the tokens Keystone issued through URL so far, oldest first.
func (k *Keystone) Issued() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.issued)
}

// Stop stops a Dedicated() Keystone: its clients and the services that
// validate tokens with it get no answer until Start.
func (k *Keystone) Stop(t testing.TB) {
	t.Helper()
	k.needDedicated(t, "Stop")
	if err := k.svc.stop(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// Start starts a stopped Keystone (same URL, database and fernet keys: the
// tokens it issued stay valid) and waits until it answers.
func (k *Keystone) Start(t testing.TB) {
	t.Helper()
	k.needDedicated(t, "Start")
	if err := k.svc.start(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

func (k *Keystone) isDedicated() bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e := registry.shared["keystone"]
	return e == nil || e.svc != k.svc
}

func (k *Keystone) needDedicated(t testing.TB, what string) {
	t.Helper()
	if !k.isDedicated() {
		t.Fatalf("e2e harness: Keystone %s would disturb every test sharing it: use harness.StartKeystone(t, harness.Dedicated())", what)
	}
}

// Credentials are what a client sends to POST /v3/auth/tokens.
type Credentials struct {
	UserID, User, UserDomainID, Password string
	ProjectID, Project, ProjectDomainID  string // scope; none: unscoped
	AppCredID, AppCredSecret             string // application credential instead
}

func (c Credentials) body() map[string]any {
	if c.AppCredID != "" {
		return map[string]any{"auth": map[string]any{"identity": map[string]any{
			"methods":                []string{"application_credential"},
			"application_credential": map[string]any{"id": c.AppCredID, "secret": c.AppCredSecret}}}}
	}
	user := map[string]any{"password": c.Password}
	if c.UserID != "" {
		user["id"] = c.UserID
	} else {
		user["name"], user["domain"] = c.User, map[string]any{"id": coalesce(c.UserDomainID, DefaultDomainID)}
	}
	auth := map[string]any{"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": user}}}
	switch {
	case c.ProjectID != "":
		auth["scope"] = map[string]any{"project": map[string]any{"id": c.ProjectID}}
	case c.Project != "":
		auth["scope"] = map[string]any{"project": map[string]any{"name": c.Project,
			"domain": map[string]any{"id": coalesce(c.ProjectDomainID, DefaultDomainID)}}}
	}
	return map[string]any{"auth": auth}
}

// Authenticate gets a token for c from Keystone directly: the token and
// when it expires, or Keystone's status and answer.
func (k *Keystone) Authenticate(ctx context.Context, c Credentials) (token string, expires time.Time, err error) {
	b, _ := json.Marshal(c.body())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.backend+"/v3/auth/tokens", bytes.NewReader(b))
	if err != nil {
		return "", time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return "", time.Time{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", time.Time{}, fmt.Errorf("keystone POST /v3/auth/tokens: %s: %s", resp.Status, raw)
	}
	var out struct {
		Token struct {
			ExpiresAt time.Time `json:"expires_at"`
		} `json:"token"`
	}
	_ = json.Unmarshal(raw, &out)
	return resp.Header.Get("X-Subject-Token"), out.Token.ExpiresAt, nil
}

// AdminToken is a token of keystone-manage's admin user (admin role on
// the admin project), re-issued shortly before it expires.
func (k *Keystone) AdminToken(t testing.TB) string {
	t.Helper()
	tok, err := k.adminToken(t.Context())
	if err != nil {
		t.Fatalf("e2e harness: admin token: %v", err)
	}
	return tok
}

func (k *Keystone) adminToken(ctx context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.admin != "" && time.Until(k.adminExp) > 30*time.Second {
		return k.admin, nil
	}
	tok, exp, err := k.Authenticate(ctx, Credentials{User: "admin", Password: KeystoneAdminPassword, Project: "admin"})
	if err != nil {
		return "", err
	}
	k.admin, k.adminExp = tok, exp
	return tok, nil
}

// Call sends one request to Keystone directly with the admin token (or
// token, when not empty) and decodes a JSON answer into out; a status
// outside ok fails the test.
func (k *Keystone) Call(t testing.TB, token, method, path string, in, out any, ok ...int) int {
	t.Helper()
	st, raw, err := k.do(t.Context(), token, method, path, in, nil)
	if err != nil {
		t.Fatalf("e2e harness: keystone %s %s: %v\n%s", method, path, err, k.svc.logTail(context.WithoutCancel(t.Context())))
	}
	if len(ok) == 0 {
		ok = []int{http.StatusOK, http.StatusCreated, http.StatusNoContent}
	}
	if !slices.Contains(ok, st) {
		t.Fatalf("e2e harness: keystone %s %s answered %d: %s", method, path, st, raw)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("e2e harness: decoding keystone %s %s: %v: %s", method, path, err, raw)
		}
	}
	return st
}

func (k *Keystone) do(ctx context.Context, token, method, path string, in any, hdr map[string]string) (int, []byte, error) {
	if token == "" {
		var err error
		if token, err = k.adminToken(ctx); err != nil {
			return 0, nil, err
		}
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.backend+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-Auth-Token", token)
	req.Header.Set("Content-Type", "application/json")
	for h, v := range hdr {
		req.Header.Set(h, v)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, nil
}

// find returns the id of the one entity at path (a list filtered by name)
// or "" when there is none.
func (k *Keystone) find(t testing.TB, path, key string) string {
	t.Helper()
	var out map[string]json.RawMessage
	k.Call(t, "", http.MethodGet, path, nil, &out)
	var l []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out[key], &l); err != nil {
		t.Fatalf("e2e harness: keystone GET %s: no %s list: %v", path, key, err)
	}
	if len(l) > 0 {
		return l[0].ID
	}
	return ""
}

// create POSTs one entity and returns its id; a 409 (created meanwhile by
// another test sharing Keystone) is answered by looking it up again.
func (k *Keystone) create(t testing.TB, path, key string, in map[string]any, lookup string) string {
	t.Helper()
	var out map[string]struct {
		ID string `json:"id"`
	}
	if k.Call(t, "", http.MethodPost, path, map[string]any{key: in}, &out, http.StatusCreated, http.StatusConflict) == http.StatusConflict {
		return k.find(t, lookup, key+"s")
	}
	return out[key].ID
}

// Domain returns the id of the domain name, created when missing.
func (k *Keystone) Domain(t testing.TB, name string) string {
	t.Helper()
	lookup := "/v3/domains?name=" + name
	if id := k.find(t, lookup, "domains"); id != "" {
		return id
	}
	return k.create(t, "/v3/domains", "domain", map[string]any{"name": name}, lookup)
}

// Project returns the id of project name in domainID, created when missing.
func (k *Keystone) Project(t testing.TB, name, domainID string) string {
	t.Helper()
	lookup := "/v3/projects?name=" + name + "&domain_id=" + domainID
	if id := k.find(t, lookup, "projects"); id != "" {
		return id
	}
	return k.create(t, "/v3/projects", "project", map[string]any{"name": name, "domain_id": domainID}, lookup)
}

// Role returns the id of the global role name, created when missing.
func (k *Keystone) Role(t testing.TB, name string) string {
	t.Helper()
	lookup := "/v3/roles?name=" + name
	if id := k.find(t, lookup, "roles"); id != "" {
		return id
	}
	return k.create(t, "/v3/roles", "role", map[string]any{"name": name}, lookup)
}

// User creates user name (a unique name: UniqueName) with password in
// domainID and grants it roles on projectID; it returns the user's id.
func (k *Keystone) User(t testing.TB, name, password, domainID, projectID string, roles ...string) string {
	t.Helper()
	var out struct {
		User struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	k.Call(t, "", http.MethodPost, "/v3/users", map[string]any{"user": map[string]any{
		"name": name, "password": password, "domain_id": domainID, "enabled": true}}, &out, http.StatusCreated)
	for _, r := range roles {
		k.Grant(t, out.User.ID, projectID, r)
	}
	return out.User.ID
}

// Grant gives userID role on projectID.
func (k *Keystone) Grant(t testing.TB, userID, projectID, role string) {
	t.Helper()
	k.Call(t, "", http.MethodPut, fmt.Sprintf("/v3/projects/%s/users/%s/roles/%s", projectID, userID, k.Role(t, role)), nil, nil)
}

// SetEnabled enables or disables userID (disabling revokes its tokens).
func (k *Keystone) SetEnabled(t testing.TB, userID string, enabled bool) {
	t.Helper()
	k.Call(t, "", http.MethodPatch, "/v3/users/"+userID, map[string]any{"user": map[string]any{"enabled": enabled}}, nil)
}

// AppCredential creates application credential name for the user c
// authenticates (scoped to its project: the credential's project and
// roles are that token's), expiring at expires unless zero; it returns
// the credential's id and secret.
func (k *Keystone) AppCredential(t testing.TB, c Credentials, userID, name string, expires time.Time) (id, secret string) {
	t.Helper()
	tok, _, err := k.Authenticate(t.Context(), c)
	if err != nil {
		t.Fatalf("e2e harness: application credential %s: %v", name, err)
	}
	in := map[string]any{"name": name}
	if !expires.IsZero() {
		in["expires_at"] = expires.UTC().Format("2006-01-02T15:04:05.000000")
	}
	var out struct {
		AC struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		} `json:"application_credential"`
	}
	k.Call(t, tok, http.MethodPost, "/v3/users/"+userID+"/application_credentials", map[string]any{"application_credential": in}, &out, http.StatusCreated)
	return out.AC.ID, out.AC.Secret
}

// Revoke revokes token (DELETE /v3/auth/tokens): every service that
// validates it with Keystone refuses it from now on.
func (k *Keystone) Revoke(t testing.TB, token string) {
	t.Helper()
	st, raw, err := k.do(t.Context(), "", http.MethodDelete, "/v3/auth/tokens", nil, map[string]string{"X-Subject-Token": token})
	if err != nil || st != http.StatusNoContent {
		t.Fatalf("e2e harness: revoking a token: %d %s %v", st, raw, err)
	}
}

// Valid reports whether Keystone still accepts token (GET /v3/auth/tokens).
func (k *Keystone) Valid(t testing.TB, token string) bool {
	t.Helper()
	st, raw, err := k.do(t.Context(), "", http.MethodGet, "/v3/auth/tokens", nil, map[string]string{"X-Subject-Token": token})
	if err != nil {
		t.Fatalf("e2e harness: validating a token: %v", err)
	}
	switch st {
	case http.StatusOK:
		return true
	case http.StatusNotFound, http.StatusUnauthorized:
		return false
	}
	t.Fatalf("e2e harness: validating a token: %d %s", st, raw)
	return false
}

// Endpoint is one catalog URL of a service.
type Endpoint struct {
	Interface string // public, internal or admin
	Region    string // "" = KeystoneRegion
	URL       string
}

// RegisterService adds endpoints to the catalog entry of service type typ
// (named name; created when missing), creating their regions as needed.
// Tests sharing Keystone register their endpoints in a region of their own
// (UniqueName), so their catalogs do not mix.
func (k *Keystone) RegisterService(t testing.TB, typ, name string, endpoints ...Endpoint) string {
	t.Helper()
	lookup := "/v3/services?type=" + typ
	var list struct {
		Services []struct{ ID, Name string } `json:"services"`
	}
	k.Call(t, "", http.MethodGet, lookup, nil, &list)
	id := ""
	for _, s := range list.Services {
		if s.Name == name {
			id = s.ID
		}
	}
	if id == "" {
		id = k.create(t, "/v3/services", "service", map[string]any{"type": typ, "name": name, "enabled": true}, lookup)
	}
	for _, e := range endpoints {
		region := coalesce(e.Region, KeystoneRegion)
		k.Call(t, "", http.MethodPost, "/v3/regions", map[string]any{"region": map[string]any{"id": region}}, nil, http.StatusCreated, http.StatusConflict)
		k.Call(t, "", http.MethodPost, "/v3/endpoints", map[string]any{"endpoint": map[string]any{
			"service_id": id, "interface": e.Interface, "region_id": region, "url": e.URL, "enabled": true}}, nil, http.StatusCreated)
	}
	return id
}

// ServiceUser creates (or finds) the user name with password in the
// Default domain and gives it the admin role on the service project: the
// user a service's keystonemiddleware validates tokens as, as installers
// set it up. It returns the user's id.
func (k *Keystone) ServiceUser(t testing.TB, name, password string) string {
	t.Helper()
	lookup := "/v3/users?name=" + name + "&domain_id=" + DefaultDomainID
	id := k.find(t, lookup, "users")
	if id == "" {
		id = k.create(t, "/v3/users", "user", map[string]any{"name": name, "password": password, "domain_id": DefaultDomainID, "enabled": true}, lookup)
	}
	k.Grant(t, id, k.Project(t, ServiceProject, DefaultDomainID), "admin")
	return id
}

func coalesce(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// DocumentedPlacementPolicy is the policy.yaml block of docs/operations.md
// ("Keystone role and Placement policy"): the least privilege operators
// are told to give scour, which the Keystone e2e tests install in
// Placement so that the documentation is what is proven.
func DocumentedPlacementPolicy(t testing.TB) string {
	t.Helper()
	sec, err := documentedPlacementPolicy()
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	return sec
}

func documentedPlacementPolicy() (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "operations.md"))
	if err != nil {
		return "", err
	}
	_, sec, ok := strings.Cut(string(b), "## Keystone role and Placement policy")
	if ok {
		_, sec, ok = strings.Cut(sec, "```yaml\n")
	}
	if ok {
		sec, _, ok = strings.Cut(sec, "```")
	}
	if !ok || !strings.Contains(sec, "placement:") {
		return "", fmt.Errorf("docs/operations.md has no ```yaml policy block under \"Keystone role and Placement policy\"")
	}
	return sec, nil
}
