package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Glance is a real Glance (Debian's glance-api, sqlite, file store,
// unauthenticated pipeline, or behind Keystone: BehindKeystone) in a
// container. URL goes through a proxy of the test's own (see Inject):
// what the system under test sees; the helpers (Upload, Share, Tamper,
// Deactivate, Delete) talk to the backend directly, as an operator
// would (with Keystone's admin token behind Keystone), so injected faults
// never break them.
type Glance struct {
	svc      *service
	backend  string
	proxy    *faultProxy
	client   *http.Client
	keystone *Keystone // BehindKeystone: validates every token
}

// GlanceServicePassword is the password of the glance service user
// (project service, role admin) that Glance's keystonemiddleware
// validates tokens as (BehindKeystone).
const GlanceServicePassword = "glance"

func newGlance() (*service, error) {
	img, err := glanceImage()
	if err != nil {
		return nil, err
	}
	return &service{kind: "glance", image: img, port: "9292/tcp", ready: glanceReady, desc: "sqlite, file store, no auth"}, nil
}

// newKeystoneGlance is a Glance whose keystonemiddleware validates tokens
// with the Keystone containers reach at keystoneURL, secure RBAC on (or,
// secureRBAC false, Glance 25's default policy: the deprecated rules OR-ed
// in) and policy (a policy.yaml body, "" for none) over it. Like Placement
// it becomes ready without its service user (an anonymous request is
// refused without asking Keystone); StartGlance creates that user.
func newKeystoneGlance(keystoneURL, policy string, secureRBAC bool) func() (*service, error) {
	return func() (*service, error) {
		s, err := newGlance()
		if err != nil {
			return nil, err
		}
		s.env = map[string]string{"GLANCE_AUTH": "keystone", "KEYSTONE_AUTH_URL": keystoneURL,
			"GLANCE_SERVICE_PASSWORD": GlanceServicePassword, "GLANCE_SECURE_RBAC": fmt.Sprint(secureRBAC), "GLANCE_POLICY": policy}
		s.desc = "sqlite, file store, behind Keystone (secure RBAC)"
		if !secureRBAC {
			s.desc = "sqlite, file store, behind Keystone (secure RBAC off: Glance 25's default, deprecated rules OR-ed in)"
		}
		return s, nil
	}
}

// keystoneGlanceKind names the shared Glance behind the Keystone at
// keystoneURL with policy, one per secure RBAC mode: a test never gets a
// Glance of the other mode.
func keystoneGlanceKind(keystoneURL, policy string, secureRBAC bool) string {
	sum := sha256.Sum256([]byte(keystoneURL + "\n" + policy))
	if !secureRBAC {
		return "glance-keystone-legacy-" + hex.EncodeToString(sum[:4])
	}
	return "glance-keystone-" + hex.EncodeToString(sum[:4])
}

// SecureRBAC(false) makes StartGlance's Glance BehindKeystone run with
// secure RBAC off ([DEFAULT] enforce_secure_rbac and [oslo_policy]
// enforce_new_defaults false: Glance 25's default, which many clouds still
// run, the deprecated rules such as rule:default OR-ed into every image
// rule). Without it (or with SecureRBAC(true)) secure RBAC is on.
func SecureRBAC(on bool) Option { return func(o *options) { o.legacyRBAC = !on } }

// glanceReady: the image API answers. Behind Keystone an anonymous
// request is 401 from keystonemiddleware once the app is loaded.
func glanceReady(ctx context.Context, hostPort int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://localhost:%d/v2/images?limit=1", hostPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("GET /v2/images answered %s", resp.Status)
	}
	return nil
}

// StartGlance returns the package's shared Glance (started on first use;
// needs harness.Main) or a dedicated one with Dedicated(), behind a
// fault-injecting proxy of this test's own. With BehindKeystone(k,
// policy) its keystonemiddleware validates every token with k (uncached),
// Glance's secure RBAC defaults are on (reader reads, download_image needs
// member; with SecureRBAC(false) off) and policy (a policy.yaml body, ""
// for none) applies over them; such Glances are shared per Keystone,
// policy and secure RBAC mode unless Dedicated(). The
// catalog gets no image endpoint: a test registers its own
// (RegisterInCatalog).
func StartGlance(t testing.TB, opts ...Option) *Glance {
	t.Helper()
	skipShort(t)
	g := &Glance{client: &http.Client{Timeout: 60 * time.Second}}
	o := collect(opts)
	if k := o.keystone; k != nil {
		k.ServiceUser(t, "glance", GlanceServicePassword)
		if !o.dedicated && k.isDedicated() {
			t.Fatalf("e2e harness: a shared Glance behind a dedicated Keystone would outlive it: pass harness.Dedicated() to StartGlance too")
		}
		secure := !o.legacyRBAC
		g.svc = acquire(t, newKeystoneGlance(k.ContainerURL(), o.policy, secure), keystoneGlanceKind(k.ContainerURL(), o.policy, secure), o.dedicated)
		g.keystone = k
	} else {
		if o.legacyRBAC {
			t.Fatalf("e2e harness: SecureRBAC(false) needs BehindKeystone: the unauthenticated Glance has no policy to relax")
		}
		g.svc = acquire(t, newGlance, "glance", o.dedicated)
	}
	g.backend = fmt.Sprintf("http://localhost:%d", g.svc.hostPort)
	proxy, err := newFaultProxy(g.backend)
	if err != nil {
		t.Fatalf("e2e harness: proxy to %s: %v", g.backend, err)
	}
	t.Cleanup(proxy.close)
	g.proxy = proxy
	return g
}

// URL is the Glance endpoint for the system under test (the proxy).
func (g *Glance) URL() string { return g.proxy.srv.URL }

// BackendURL is Glance itself, bypassing the proxy and its faults.
func (g *Glance) BackendURL() string { return g.backend }

// Inject makes the proxy apply f to the following requests to URL.
func (g *Glance) Inject(f Fault) { g.proxy.set(f) }

// Heal ends any injected fault.
func (g *Glance) Heal() { g.Inject(Fault{}) }

// RegisterInCatalog adds Glance's endpoints (service type image) to its
// Keystone's catalog in region, one per interface, all at URL (the
// test's proxy), and returns region.
func (g *Glance) RegisterInCatalog(t testing.TB, region string, interfaces ...string) string {
	t.Helper()
	if g.keystone == nil {
		t.Fatalf("e2e harness: RegisterInCatalog needs a Glance BehindKeystone")
	}
	g.keystone.RegisterService(t, "image", "glance", endpoints(region, g.URL(), interfaces)...)
	return region
}

// endpoints are one catalog endpoint at url in region per interface.
func endpoints(region, url string, interfaces []string) []Endpoint {
	var eps []Endpoint
	for _, i := range interfaces {
		eps = append(eps, Endpoint{Interface: i, Region: region, URL: url})
	}
	return eps
}

// Share makes image id visible to projectID as Glance's image sharing
// does (POST /v2/images/{id}/members), the membership accepted (PUT
// .../members/{project} status accepted), as the admin.
func (g *Glance) Share(t testing.TB, id, projectID string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"member": projectID})
	g.do(t, http.MethodPost, "/v2/images/"+id+"/members", "application/json", body, http.StatusOK, nil)
	body, _ = json.Marshal(map[string]string{"status": "accepted"})
	g.do(t, http.MethodPut, "/v2/images/"+id+"/members/"+projectID, "application/json", body, http.StatusOK, nil)
}

// Requests counts requests that reached the proxy, and of those the ones
// a fault applied to.
func (g *Glance) Requests() (total, faulted int64) {
	return g.proxy.requests.Load(), g.proxy.faulted.Load()
}

// GlanceOwner is the project that owns uploaded images unless
// GlanceImage.Owner says otherwise: the operator's project, which the
// tests list in images.glance.owners.
const GlanceOwner = "0123456789abcdef0123456789abcdef"

// GlanceImage is what Upload creates.
type GlanceImage struct {
	Name       string
	Properties map[string]string
	Tags       []string
	Data       []byte
	// Owner is the owning project (default GlanceOwner); the harness
	// uploads as an admin (unauthenticated, or Keystone's admin), which
	// may set it. Behind Keystone it is a real project's id.
	Owner string
}

// Upload creates an image and uploads its data as an operator does
// (POST /v2/images, then PUT /v2/images/{id}/file), so Glance computes
// its multihash; it returns the image's id once it is active.
func (g *Glance) Upload(t testing.TB, img GlanceImage) string {
	t.Helper()
	meta := map[string]any{"name": img.Name, "disk_format": "raw", "container_format": "bare", "tags": append([]string{}, img.Tags...)}
	for k, v := range img.Properties {
		meta[k] = v
	}
	meta["owner"] = img.Owner
	if img.Owner == "" {
		meta["owner"] = GlanceOwner
	}
	body, _ := json.Marshal(meta)
	var created struct{ ID string }
	g.do(t, http.MethodPost, "/v2/images", "application/json", body, http.StatusCreated, &created)
	g.do(t, http.MethodPut, "/v2/images/"+created.ID+"/file", "application/octet-stream", img.Data, http.StatusNoContent, nil)
	if st := g.Image(t, created.ID)["status"]; st != "active" {
		t.Fatalf("e2e harness: glance image %s is %v after upload, want active", created.ID, st)
	}
	return created.ID
}

// Image is Glance's record of image id (GET /v2/images/{id}).
func (g *Glance) Image(t testing.TB, id string) map[string]any {
	t.Helper()
	var m map[string]any
	g.do(t, http.MethodGet, "/v2/images/"+id, "", nil, http.StatusOK, &m)
	return m
}

// Deactivate makes the image unusable (POST .../actions/deactivate).
func (g *Glance) Deactivate(t testing.TB, id string) {
	t.Helper()
	g.do(t, http.MethodPost, "/v2/images/"+id+"/actions/deactivate", "", nil, http.StatusNoContent, nil)
}

// Delete deletes the image.
func (g *Glance) Delete(t testing.TB, id string) {
	t.Helper()
	g.do(t, http.MethodDelete, "/v2/images/"+id, "", nil, http.StatusNoContent, nil)
}

// Tamper changes the stored data of image id behind Glance's back: it
// flips the bits of one byte at offset in the file store
// (/var/lib/glance/images/<id>); Glance's record (size, hashes) stays.
func (g *Glance) Tamper(t testing.TB, id string, offset int64) {
	t.Helper()
	script := fmt.Sprintf("f = open('/var/lib/glance/images/%s', 'r+b'); f.seek(%d); b = f.read(1); f.seek(%d); f.write(bytes([b[0] ^ 0xff])); f.close()", id, offset, offset)
	if out, err := g.svc.exec(t.Context(), "", "python3", "-c", script); err != nil {
		t.Fatalf("e2e harness: tampering with glance image %s: %v\n%s", id, err, out)
	}
}

func (g *Glance) do(t testing.TB, method, path, ctype string, body []byte, want int, out any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.backend+path, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if g.keystone != nil {
		req.Header.Set("X-Auth-Token", g.keystone.AdminToken(t))
	}
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("e2e harness: glance %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("e2e harness: glance %s %s: %s, want %d: %s", method, path, resp.Status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("e2e harness: glance %s %s: %v: %s", method, path, err, b)
		}
	}
}
