package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

// Microversion is the highest Placement microversion Debian's placement
// 8.0.0 serves, and the one the harness's clients use by default.
const Microversion = "1.39"

// Placement is a Placement API the test may use. URL goes through a proxy of
// the test's own (see Inject): what the system under test sees. The
// harness's own helpers (seeding, Nova actions, reads) talk to the backend
// directly, so injected faults never break a test's setup or assertions.
type Placement struct {
	svc     *service // nil for an external Placement
	backend string
	token   string
	proxy   *faultProxy
	client  *http.Client
	mode    PlacementMode
	// keystone, when set, validates every token (BehindKeystone): the
	// harness's own requests carry its admin token.
	keystone *Keystone
}

// PlacementServicePassword is the password of the placement service user
// (project service, role admin) that Placement's keystonemiddleware
// validates tokens as (BehindKeystone).
const PlacementServicePassword = "placement"

// BehindKeystone makes StartPlacement's Placement (or StartGlance's
// Glance: see there) authenticate every request with k (auth_strategy
// keystone, keystonemiddleware, token validations not cached so a
// revoked token is refused at once) and apply
// policy (a policy.yaml body; "" keeps Placement's defaults) over its
// default policies. Placements of the same Keystone and policy are shared
// unless Dedicated(); k must be shared too then. The catalog gets no
// Placement endpoint: a test registers its own (RegisterInCatalog).
func BehindKeystone(k *Keystone, policy string) Option {
	return func(o *options) { o.keystone, o.policy = k, policy }
}

func newPlacement() (*service, error) {
	_, placement, err := imageNames()
	if err != nil {
		return nil, err
	}
	mode, err := placementMode()
	if err != nil {
		return nil, err
	}
	return &service{kind: "placement", image: placement, port: "8778/tcp", ready: placementReady,
		env: mode.env(), desc: mode.String()}, nil
}

var placementReady = httpReady("/")

// newKeystonePlacement is a Placement whose keystonemiddleware validates
// tokens with the Keystone containers reach at keystoneURL, policy (a
// policy.yaml body, "" for none) over its defaults. It needs no Keystone
// user to become ready (version discovery is anonymous): the service
// user is created by StartPlacement before any request needs it.
func newKeystonePlacement(keystoneURL, policy string) func() (*service, error) {
	return func() (*service, error) {
		s, err := newPlacement()
		if err != nil {
			return nil, err
		}
		s.env["PLACEMENT_AUTH"] = "keystone"
		s.env["KEYSTONE_AUTH_URL"] = keystoneURL
		s.env["PLACEMENT_SERVICE_PASSWORD"] = PlacementServicePassword
		s.env["PLACEMENT_POLICY"] = policy
		s.desc += ", behind Keystone"
		if policy != "" {
			s.desc += " with a policy file"
		}
		return s, nil
	}
}

// keystonePlacementKind names the shared Placement behind the shared
// Keystone with policy (one per policy).
func keystonePlacementKind(policy string) string {
	sum := sha256.Sum256([]byte(policy))
	return "placement-keystone-" + hex.EncodeToString(sum[:4])
}

// httpReady is a readiness check: GET path on the host port answers 200.
func httpReady(path string) func(ctx context.Context, hostPort int) error {
	return func(ctx context.Context, hostPort int) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://localhost:%d%s", hostPort, path), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s answered %s", path, resp.Status)
		}
		return nil
	}
}

// StartPlacement returns the package's shared Placement (started on first
// use; needs harness.Main), a dedicated one with Dedicated(), or the one at
// SCOUR_E2E_PLACEMENT_URL, behind a fault-injecting proxy of this test's own.
func StartPlacement(t testing.TB, opts ...Option) *Placement {
	t.Helper()
	skipShort(t)
	o := collect(opts)
	u := os.Getenv(EnvPlacementURL)
	switch k := o.keystone; {
	case u == "" && k != nil:
		k.ServiceUser(t, "placement", PlacementServicePassword)
		if !o.dedicated && k.isDedicated() {
			t.Fatalf("e2e harness: a shared Placement behind a dedicated Keystone would outlive it: pass harness.Dedicated() to StartPlacement too")
		}
		return placementOn(t, acquire(t, newKeystonePlacement(k.ContainerURL(), o.policy), keystonePlacementKind(o.policy), o.dedicated), k)
	case u == "":
		return placementOn(t, acquire(t, newPlacement, "placement", o.dedicated), nil)
	case k != nil:
		t.Skipf("e2e harness: a Placement behind Keystone needs container mode; %s points at an external Placement", EnvPlacementURL)
	case o.dedicated:
		t.Skipf("e2e harness: a dedicated Placement needs container mode; %s points at an external Placement", EnvPlacementURL)
	}
	p := &Placement{token: "admin", client: &http.Client{Timeout: 30 * time.Second}, backend: strings.TrimSuffix(u, "/")}
	if tok := os.Getenv(EnvPlacementToken); tok != "" {
		p.token = tok
	}
	p.withProxy(t)
	return p
}

// placementOn is the test's Placement on svc (ready), behind k when k is
// not nil.
func placementOn(t testing.TB, svc *service, k *Keystone) *Placement {
	t.Helper()
	p := &Placement{token: "admin", client: &http.Client{Timeout: 30 * time.Second}, svc: svc, keystone: k,
		backend: fmt.Sprintf("http://localhost:%d", svc.hostPort)}
	p.mode, _ = placementMode() // newPlacement checked it
	p.withProxy(t)
	return p
}

// withProxy puts a fault proxy of t's own in front of p's backend.
func (p *Placement) withProxy(t testing.TB) {
	t.Helper()
	proxy, err := newFaultProxy(p.backend)
	if err != nil {
		t.Fatalf("e2e harness: proxy to %s: %v", p.backend, err)
	}
	t.Cleanup(proxy.close)
	p.proxy = proxy
}

// StartDedicatedKeystonePlacement is StartKeystone(t, Dedicated(),
// TokenExpiration(exp)) and then StartPlacement(t, Dedicated(),
// BehindKeystone(k, policy)) in about the time of the slower of the two
// starts instead of their sum: the Placement container starts as soon as
// Keystone's port is known (it needs Keystone only to validate tokens,
// and its service user exists before this returns). Both are removed
// when t ends.
func StartDedicatedKeystonePlacement(t testing.TB, exp time.Duration, policy string) (*Keystone, *Placement) {
	t.Helper()
	skipShort(t)
	if os.Getenv(EnvPlacementURL) != "" {
		t.Skipf("e2e harness: a Placement behind Keystone needs container mode; %s points at an external Placement", EnvPlacementURL)
	}
	if err := engineEnv(); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	t0 := time.Now()
	ks, err := newKeystone(exp)()
	if err == nil {
		err = runContainer(t.Context(), ks)
	}
	if ks != nil && ks.c != nil {
		t.Cleanup(func() { _ = ks.terminate(context.Background()) })
	}
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	ps, err := newKeystonePlacement(keystoneContainerURL(ks.hostPort), policy)()
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	started := make(chan error, 1)
	go func() { started <- startService(t.Context(), ps) }()
	var psErr error
	psDone := false
	waitPlacement := func() error { // on the test's goroutine only
		if !psDone {
			psErr, psDone = <-started, true
		}
		return psErr
	}
	// The test's context ends before its cleanups run: a start still in
	// progress gives up, and then its container is removed.
	t.Cleanup(func() {
		_ = waitPlacement()
		_ = ps.terminate(context.Background())
	})
	if err := ks.waitReady(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	ks.started = time.Since(t0)
	t.Logf("e2e harness: dedicated keystone%s ready on localhost:%d in %s", ks.describe(), ks.hostPort, ks.started.Round(time.Millisecond))
	k := keystoneOn(t, ks)
	k.ServiceUser(t, "placement", PlacementServicePassword)
	if err := waitPlacement(); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	t.Logf("e2e harness: dedicated placement%s ready on localhost:%d in %s (started with Keystone)", ps.describe(), ps.hostPort, ps.started.Round(time.Millisecond))
	return k, placementOn(t, ps, k)
}

// URL is the Placement endpoint for the system under test (the proxy).
func (p *Placement) URL() string { return p.proxy.srv.URL }

// Mode is how the Placement container serves (database, worker processes);
// the zero PlacementMode for an external Placement (EnvPlacementURL).
func (p *Placement) Mode() PlacementMode { return p.mode }

// BackendURL is Placement itself, bypassing the proxy and its faults.
func (p *Placement) BackendURL() string { return p.backend }

// Token is the X-Auth-Token to send: "admin" under noauth2, Keystone's
// admin token behind Keystone ("" when Keystone does not answer).
func (p *Placement) Token() string {
	if p.keystone != nil {
		tok, _ := p.keystone.adminToken(context.Background())
		return tok
	}
	return p.token
}

// Keystone is the Keystone Placement validates tokens with, or nil.
func (p *Placement) Keystone() *Keystone { return p.keystone }

// RegisterInCatalog adds Placement's endpoints to its Keystone's catalog
// in region (the test's own, e.g. UniqueName("region")), one per
// interface, all at URL (the test's proxy), and returns region.
func (p *Placement) RegisterInCatalog(t testing.TB, region string, interfaces ...string) string {
	t.Helper()
	if p.keystone == nil {
		t.Fatalf("e2e harness: RegisterInCatalog needs a Placement BehindKeystone")
	}
	p.keystone.RegisterService(t, "placement", "placement", endpoints(region, p.URL(), interfaces)...)
	return region
}

// HTTPClient is a plain client with a timeout, for requests to URL.
func (p *Placement) HTTPClient() *http.Client { return p.client }

// ServiceClient is a gophercloud client for URL at Microversion, with the
// token set, ready for gophercloud's placement/v1 packages.
func (p *Placement) ServiceClient() *gophercloud.ServiceClient {
	pc := &gophercloud.ProviderClient{HTTPClient: *p.client, TokenID: p.Token()}
	return &gophercloud.ServiceClient{
		ProviderClient: pc,
		Endpoint:       p.URL() + "/",
		ResourceBase:   p.URL() + "/",
		Type:           "placement",
		Microversion:   Microversion,
	}
}

// Inject makes the proxy apply f to the following requests to URL.
func (p *Placement) Inject(f Fault) { p.proxy.set(f) }

// Fail makes every request to URL answer status (e.g. 500) until Heal.
func (p *Placement) Fail(status int) { p.Inject(Fault{Status: status}) }

// Hang holds every request to URL for d (or until its client gives up)
// before forwarding it, until Heal.
func (p *Placement) Hang(d time.Duration) { p.Inject(Fault{Delay: d}) }

// Heal ends any injected fault.
func (p *Placement) Heal() { p.Inject(Fault{}) }

// Requests counts requests that reached the proxy, and of those the ones a
// fault applied to.
func (p *Placement) Requests() (total, faulted int64) {
	return p.proxy.requests.Load(), p.proxy.faulted.Load()
}

// Stop stops the Placement container: requests to URL fail with 502 until
// Start. Needs a Dedicated() Placement.
func (p *Placement) Stop(t testing.TB) {
	t.Helper()
	p.needDedicated(t, "Stop")
	if err := p.svc.stop(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// Start starts a stopped Placement (same URL, same database) and waits
// until it answers.
func (p *Placement) Start(t testing.TB) {
	t.Helper()
	p.needDedicated(t, "Start")
	t0 := time.Now()
	if err := p.svc.start(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	t.Logf("e2e harness: placement back in %s", time.Since(t0).Round(time.Millisecond))
}

func (p *Placement) needDedicated(t testing.TB, what string) {
	t.Helper()
	if p.svc == nil {
		t.Skipf("e2e harness: %s needs the Placement container; %s points at an external Placement", what, EnvPlacementURL)
	}
	registry.mu.Lock()
	e := registry.shared["placement"]
	shared := e != nil && e.svc == p.svc
	registry.mu.Unlock()
	if shared {
		t.Fatalf("e2e harness: %s would disturb every test sharing Placement: use harness.StartPlacement(t, harness.Dedicated())", what)
	}
}

// RebuildDatabase loses Placement's database and starts Placement again
// on an empty one, as a restore from an empty or old backup does:
// placement-start creates the database again (db sync, the standard
// traits, HW_PCI_ONE_TIME_USE), so every provider, allocation and custom
// trait is gone and the test seeds what nova-compute would report again.
// Needs a Dedicated() Placement.
func (p *Placement) RebuildDatabase(t testing.TB) {
	t.Helper()
	p.needDedicated(t, "RebuildDatabase")
	var err error
	switch p.mode.DB {
	case "sqlite":
		_, err = p.svc.exec(t.Context(), "", "rm", "-f", "/var/lib/placement/placement.sqlite")
	default: // placement-start creates role and database when the role is missing
		for _, sql := range []string{"DROP DATABASE placement WITH (FORCE)", "DROP ROLE placement"} {
			if _, err = p.svc.exec(t.Context(), "postgres", "psql", "-p", "5432", "-v", "ON_ERROR_STOP=1", "-c", sql); err != nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("e2e harness: dropping Placement's database: %v", err)
	}
	p.Stop(t)
	p.Start(t)
}
