package placement

// The client against a real Keystone (e2e/harness: Keystone 22) and a
// real Placement behind it with the policy docs/operations.md gives
// operators. keystone_test.go checks the token requests against a
// stand-in; these check that Keystone and Placement accept them.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// ksEnv is a Placement behind Keystone with one seeded host, its
// endpoints in a catalog region of the test's own, and a user domain of
// the test's own.
type ksEnv struct {
	env        testEnv
	k          *harness.Keystone
	host       *seedHost
	region     string
	service    string // the service project's id
	domain     string // the test's user domain: id and name
	domainName string
}

func keystoneEnv(t *testing.T) *ksEnv {
	t.Helper()
	// Safe for tests running in parallel: Keystone and Placement are
	// shared, but each test has its own fault proxy (Fail, Requests,
	// Issued), catalog region, user domain, users and compute node.
	k := harness.StartKeystone(t)
	return keystoneEnvOn(t, k, harness.StartPlacement(t, harness.BehindKeystone(k, harness.DocumentedPlacementPolicy(t))))
}

// keystoneEnvOn is keystoneEnv on a Keystone and a Placement behind it
// that the test started itself (a dedicated pair, for example).
func keystoneEnvOn(t *testing.T, k *harness.Keystone, p *harness.Placement) *ksEnv {
	t.Helper()
	e := &ksEnv{k: k, env: testEnv{URL: strings.TrimRight(p.URL(), "/"), Backend: strings.TrimRight(p.BackendURL(), "/"), Token: p.Token(), P: p}}
	e.region = p.RegisterInCatalog(t, harness.UniqueName("region"), "internal", "public")
	e.service = k.Project(t, harness.ServiceProject, harness.DefaultDomainID)
	e.domainName = harness.UniqueName("users")
	e.domain = k.Domain(t, e.domainName)
	e.host = seedNode(t, e.env)
	return e
}

// user creates a user of the test's domain with roles on the service
// project and returns its name and id (password "pw-"+name).
func (e *ksEnv) user(t *testing.T, roles ...string) (name, id string) {
	t.Helper()
	name = harness.UniqueName("scour")
	return name, e.k.User(t, name, "pw-"+name, e.domain, e.service, roles...)
}

// openrc is the OS_* variables of a password openrc for user name.
func (e *ksEnv) openrc(name string) map[string]string {
	return map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_USERNAME": name, "OS_PASSWORD": "pw-" + name,
		"OS_USER_DOMAIN_NAME": e.domainName, "OS_PROJECT_NAME": harness.ServiceProject, "OS_PROJECT_DOMAIN_NAME": "Default"}
}

func (e *ksEnv) config(mod ...func(*Config)) Config {
	cfg := Config{Node: e.host.Node, Region: e.region, Interface: "internal",
		Retry: RetryConfig{Attempts: 5, Base: 5 * time.Millisecond, Max: 100 * time.Millisecond, Budget: 10 * time.Second}}
	for _, m := range mod {
		m(&cfg)
	}
	return cfg
}

func envOf(m map[string]string) Option {
	return WithGetenv(func(k string) string { return m[k] })
}

// newKS is New with the OS_* variables env, failing the test on error.
func (e *ksEnv) newKS(t *testing.T, env map[string]string, mod ...func(*Config)) *Client {
	t.Helper()
	c, err := New(t.Context(), e.config(mod...), envOf(env))
	if err != nil {
		t.Fatalf("placement.New: %v", err)
	}
	return c
}

// Every credential form scour documents authenticates against Keystone,
// finds Placement in the catalog (the test's region, interface internal)
// and, with only the role scour and the documented policy, un-reserves a
// device.
func TestKeystoneE2ECredentialForms(t *testing.T) {
	t.Parallel()
	e := keystoneEnv(t)
	name, id := e.user(t, "scour")
	pw := "pw-" + name
	acID, acSecret := e.k.AppCredential(t, harness.Credentials{UserID: id, Password: pw, ProjectID: e.service}, id, "scour-ac", time.Time{})
	clouds := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := os.WriteFile(clouds, []byte(`clouds:
  scour:
    region_name: `+e.region+`
    interface: internal
    auth:
      auth_url: `+e.k.URL()+`
      username: `+name+`
      password: `+pw+`
      user_domain_name: `+e.domainName+`
      project_name: service
      project_domain_id: default
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, _, err := e.k.Authenticate(t.Context(), harness.Credentials{UserID: id, Password: pw, ProjectID: e.service})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		env  map[string]string
		mod  func(*Config)
	}{
		{name: "openrc, password, domain names", env: e.openrc(name)},
		{name: "openrc, password, domain ids", env: map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_USERNAME": name, "OS_PASSWORD": pw,
			"OS_USER_DOMAIN_ID": e.domain, "OS_PROJECT_NAME": harness.ServiceProject, "OS_PROJECT_DOMAIN_ID": harness.DefaultDomainID}},
		{name: "openrc, password, user and project ids", env: map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_USER_ID": id, "OS_PASSWORD": pw, "OS_PROJECT_ID": e.service}},
		{name: "application credential by id", env: map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_AUTH_TYPE": "v3applicationcredential",
			"OS_APPLICATION_CREDENTIAL_ID": acID, "OS_APPLICATION_CREDENTIAL_SECRET": acSecret}},
		{name: "application credential by name", env: map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_APPLICATION_CREDENTIAL_NAME": "scour-ac",
			"OS_APPLICATION_CREDENTIAL_SECRET": acSecret, "OS_USERNAME": name, "OS_USER_DOMAIN_NAME": e.domainName}},
		{name: "clouds.yaml, named cloud", mod: func(c *Config) { c.Cloud, c.CloudsFile, c.Region, c.Interface = "scour", clouds, "", "" }},
		{name: "OS_TOKEN", env: map[string]string{"OS_AUTH_URL": e.k.URL(), "OS_TOKEN": tok, "OS_PROJECT_ID": e.service}},
	} {
		addr := fmt.Sprintf("0000:%02x:00.0", 0x81+i)
		t.Run(tc.name, func(t *testing.T) {
			mod := []func(*Config){}
			if tc.mod != nil {
				mod = append(mod, tc.mod)
			}
			before := len(e.k.Issued())
			c := e.newKS(t, tc.env, mod...)
			if !strings.HasPrefix(c.sc.Endpoint, e.env.URL) {
				t.Errorf("endpoint %s, want the catalog's internal one of region %s (%s)", c.sc.Endpoint, e.region, e.env.URL)
			}
			if len(e.k.Issued()) != before+1 {
				t.Errorf("Keystone issued %d tokens through scour's auth URL, want 1", len(e.k.Issued())-before)
			}
			dev := e.host.seedDevice(devSpec{Addr: addr, Reserved: 1})
			if err := c.Unreserve(t.Context(), dev, &MemJournal{}); err != nil {
				t.Fatalf("Unreserve: %v", err)
			}
			if r := e.host.reserved(dev); r != 0 {
				t.Errorf("reserved %d after Unreserve, want 0", r)
			}
		})
	}
}

// The catalog decides the endpoint: interface and region are honoured, a
// region or interface the catalog lacks is a clear error naming what it
// has, and an explicit placement.endpoint works without any catalog entry.
func TestKeystoneE2ECatalog(t *testing.T) {
	t.Parallel()
	e := keystoneEnv(t)
	name, _ := e.user(t, "scour")
	// A region with only a public endpoint, at an address nothing serves.
	publicOnly := harness.UniqueName("region")
	e.k.RegisterService(t, "placement", "placement", harness.Endpoint{Interface: "public", Region: publicOnly, URL: "http://127.0.0.1:9/placement"})
	empty := harness.UniqueName("region")
	e.k.RegisterService(t, "identity-extra", "other", harness.Endpoint{Interface: "internal", Region: empty, URL: "http://127.0.0.1:9/"})

	_, err := New(t.Context(), e.config(func(c *Config) { c.Region = publicOnly }), envOf(e.openrc(name)))
	if err == nil || !strings.Contains(err.Error(), `interface "internal"`) || !strings.Contains(err.Error(), "only: public in region "+publicOnly) {
		t.Errorf("internal wanted, only public in the region: %v; want an error naming the interface and the catalog's public endpoint", err)
	}
	_, err = New(t.Context(), e.config(func(c *Config) { c.Region = empty }), envOf(e.openrc(name)))
	if err == nil || !strings.Contains(err.Error(), `no endpoint in region "`+empty+`"`) || !strings.Contains(err.Error(), e.region) {
		t.Errorf("region without Placement: %v; want an error naming the region and those that have Placement", err)
	}
	// The public interface of the test's own region serves too.
	if c := e.newKS(t, e.openrc(name), func(c *Config) { c.Interface = "public" }); !strings.HasPrefix(c.sc.Endpoint, e.env.URL) {
		t.Errorf("public endpoint %s, want %s", c.sc.Endpoint, e.env.URL)
	}
	// An explicit endpoint: the catalog is not consulted.
	c := e.newKS(t, e.openrc(name), func(c *Config) { c.Region, c.Endpoint = empty, e.env.URL })
	if _, err := c.Scan(t.Context()); err != nil {
		t.Fatalf("Scan with placement.endpoint and a region without Placement: %v", err)
	}
}

// Credentials Keystone refuses stop New with ErrCredentials (scourd exits
// 78) naming the fields to check, after one login attempt; a role
// Placement's policy refuses stops it with ErrForbidden naming the rule.
func TestKeystoneE2ERefusals(t *testing.T) {
	t.Parallel()
	e := keystoneEnv(t)
	name, id := e.user(t, "scour")
	disabled, disabledID := e.user(t, "scour")
	e.k.SetEnabled(t, disabledID, false)
	noRole, _ := e.user(t)
	reader, _ := e.user(t, "reader")
	// An application credential that expires in a few seconds: wait
	// until Keystone refuses it (a condition, bounded), then use it.
	acID, acSecret := e.k.AppCredential(t, harness.Credentials{UserID: id, Password: "pw-" + name, ProjectID: e.service}, id,
		"short-lived", time.Now().Add(3*time.Second))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, _, err := e.k.Authenticate(t.Context(), harness.Credentials{AppCredID: acID, AppCredSecret: acSecret}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Keystone still accepts the application credential 60s after it expired")
		}
		time.Sleep(200 * time.Millisecond)
	}
	wrong := e.openrc(name)
	wrong["OS_PASSWORD"] = "not-the-password"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want error
		says []string
	}{
		{"wrong password", wrong, ErrCredentials, []string{"HTTP 401", "OS_PASSWORD", "OS_USERNAME " + name}},
		{"disabled user", e.openrc(disabled), ErrCredentials, []string{"HTTP 401", "user disabled"}},
		{"expired application credential", map[string]string{"OS_AUTH_URL": e.k.URL(),
			"OS_APPLICATION_CREDENTIAL_ID": acID, "OS_APPLICATION_CREDENTIAL_SECRET": acSecret}, ErrCredentials,
			[]string{"HTTP 401", "OS_APPLICATION_CREDENTIAL_ID " + acID, "expired"}},
		{"no role on the project", e.openrc(noRole), ErrCredentials, []string{"HTTP 401", "OS_PROJECT_NAME service", "without a role on that project"}},
		{"role reader only", e.openrc(reader), ErrForbidden, []string{"HTTP 403", "Policy does not allow placement:traits:update"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.k.Requests()
			_, err := New(t.Context(), e.config(), envOf(tc.env))
			if !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q: %v", s, err)
				}
			}
			if strings.Contains(err.Error(), "pw-") || strings.Contains(err.Error(), acSecret) || strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("error shows a secret: %v", err)
			}
			if after, _ := e.k.Requests(); after-before != 1 {
				t.Errorf("%d requests to Keystone, want 1 login attempt", after-before)
			}
		})
	}
}

// A revoked token is replaced (one new login) and the operation in flight
// lands once; with Keystone down a valid token keeps working, and once it
// is revoked a scan fails recoverably (no credential cooldown: nothing was
// refused) while an un-reserve waits for Keystone, the device reserved,
// and lands once Keystone is back.
func TestKeystoneE2EReauthentication(t *testing.T) {
	t.Parallel()
	e := keystoneEnv(t)
	name, _ := e.user(t, "scour")
	c := e.newKS(t, e.openrc(name))
	devs := []Ref{
		e.host.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1}),
		e.host.seedDevice(devSpec{Addr: "0000:82:00.0", Reserved: 1}),
		e.host.seedDevice(devSpec{Addr: "0000:83:00.0", Reserved: 1}),
	}
	issued := e.k.Issued()
	e.k.Revoke(t, issued[len(issued)-1])
	if err := c.Unreserve(t.Context(), devs[0], &MemJournal{}); err != nil {
		t.Fatalf("Unreserve after the token was revoked: %v", err)
	}
	if got := len(e.k.Issued()) - len(issued); got != 1 {
		t.Errorf("%d new tokens after the revocation, want 1", got)
	}
	if r := e.host.reserved(devs[0]); r != 0 {
		t.Errorf("reserved %d, want 0", r)
	}

	e.k.Fail(http.StatusServiceUnavailable)
	if err := c.Unreserve(t.Context(), devs[1], &MemJournal{}); err != nil {
		t.Fatalf("Unreserve with Keystone down and the token valid: %v", err)
	}
	issued = e.k.Issued()
	e.k.Revoke(t, issued[len(issued)-1]) // the harness reaches Keystone; scour does not
	if _, err := c.Scan(t.Context()); !IsRecoverable(err) || errors.Is(err, ErrCredentials) {
		t.Fatalf("Scan with Keystone down and the token revoked: %v, want a recoverable error that is no credential refusal", err)
	}
	// The un-reserve waits for Keystone (probing it), the device reserved,
	// and lands once Keystone answers.
	_, faulted := e.k.Requests()
	done := make(chan error, 1)
	go func() { done <- c.Unreserve(t.Context(), devs[2], &MemJournal{}) }()
	deadline := time.Now().Add(2 * time.Minute)
	for _, f := e.k.Requests(); f < faulted+3; _, f = e.k.Requests() { // its re-logins, then probes
		select {
		case err := <-done:
			t.Fatalf("Unreserve with Keystone down and the token revoked ended: %v; want it to wait for Keystone", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the un-reserve sent nothing more to Keystone within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.host.reserved(devs[2]); r != 1 {
		t.Fatalf("reserved %d while the un-reserve waits for Keystone, want 1", r)
	}
	e.k.Heal()
	if err := <-done; err != nil {
		t.Fatalf("Unreserve once Keystone is back: %v", err)
	}
	if r := e.host.reserved(devs[2]); r != 0 {
		t.Errorf("reserved %d, want 0", r)
	}
	if got := len(e.k.Issued()) - len(issued); got != 1 {
		t.Errorf("%d new tokens once Keystone answered, want 1", got)
	}
}

// A token that really expires (a dedicated Keystone issuing 45 s
// tokens), not one revoked: the client logs in, its token runs out between
// two operations of a run, and the next un-reserve logs in once more and
// lands once. keystonemiddleware refuses an expired token as it refuses a
// revoked one (401), but only a real expiry proves scour does not keep
// using a token past its expires_at.
func TestKeystoneE2ETokenExpires(t *testing.T) {
	t.Parallel()
	const life = 45 * time.Second
	k := harness.StartKeystone(t, harness.Dedicated(), harness.TokenExpiration(life))
	e := keystoneEnvOn(t, k, harness.StartPlacement(t, harness.Dedicated(), harness.BehindKeystone(k, harness.DocumentedPlacementPolicy(t))))
	name, _ := e.user(t, "scour")
	before := len(e.k.Issued())
	c := e.newKS(t, e.openrc(name))
	devs := []Ref{
		e.host.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1}),
		e.host.seedDevice(devSpec{Addr: "0000:82:00.0", Reserved: 1}),
	}
	if err := c.Unreserve(t.Context(), devs[0], &MemJournal{}); err != nil {
		t.Fatalf("Unreserve with a fresh token: %v", err)
	}
	issued := e.k.Issued()
	if len(issued) <= before {
		t.Fatal("the client un-reserved without logging in to Keystone")
	}
	token := issued[len(issued)-1]
	// Wait for Keystone itself to call the token expired: no clock of the
	// test's decides it.
	deadline := time.Now().Add(life + 2*time.Minute)
	for e.k.Valid(t, token) {
		if time.Now().After(deadline) {
			t.Fatalf("Keystone still accepts a %s token after %s", life, life+2*time.Minute)
		}
		time.Sleep(time.Second)
	}
	if err := c.Unreserve(t.Context(), devs[1], &MemJournal{}); err != nil {
		t.Fatalf("Unreserve after the token expired: %v", err)
	}
	if r := e.host.reserved(devs[1]); r != 0 {
		t.Errorf("reserved %d after the un-reserve, want 0", r)
	}
	if got := len(e.k.Issued()) - len(issued); got != 1 {
		t.Errorf("%d new tokens after the expiry, want 1", got)
	}
}

// Keystone down at start is transient, not a credential refusal: scourd
// exits 1 (systemd starts it again) instead of 78, and no cooldown is
// taken for a login Keystone never answered.
func TestKeystoneE2EDownAtStart(t *testing.T) {
	t.Parallel()
	e := keystoneEnv(t)
	name, _ := e.user(t, "scour")
	e.k.Fail(http.StatusServiceUnavailable)
	_, err := New(t.Context(), e.config(), envOf(e.openrc(name)))
	if !IsRecoverable(err) || errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), "did not answer the login") {
		t.Fatalf("New with Keystone down: %v; want a recoverable error saying Keystone did not answer", err)
	}
	e.k.Heal()
	if _, err := New(t.Context(), e.config(), envOf(e.openrc(name))); err != nil {
		t.Fatalf("New once Keystone answers: %v", err)
	}
}
