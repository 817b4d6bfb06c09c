package images

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	gimages "github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// fakeGlance answers GET /v2/images (every image, filters ignored, as the
// worst Glance would) and GET /v2/images/{id}; it records list queries.
type fakeGlance struct {
	images []map[string]any
	mu     sync.Mutex
	seen   []string
}

func (f *fakeGlance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v2/images" {
		f.mu.Lock()
		f.seen = append(f.seen, r.URL.RawQuery)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"images": f.images})
		return
	}
	for _, m := range f.images {
		if r.URL.Path == "/v2/images/"+m["id"].(string) {
			_ = json.NewEncoder(w).Encode(m)
			return
		}
	}
	http.NotFound(w, r)
}

func glanceImage(id, owner, status string) map[string]any {
	return map[string]any{"id": id, "name": "n3000-" + id, "status": status, "owner": owner,
		"visibility": "private", "tags": []string{"golden"}, "scour_model": "n3000", "bitstream_id": "0x" + id,
		"size": 10, "os_hash_algo": "sha512", "os_hash_value": strings.Repeat("ab", 64)}
}

func newFakeGlance(t *testing.T, owners []string, imgs ...map[string]any) (*Glance, *fakeGlance) {
	t.Helper()
	f := &fakeGlance{images: imgs}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := OpenCache(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return NewGlance(StaticClient(EndpointClient(srv.URL, "", http.Client{})), c, GlanceConfig{Owners: owners, Attempts: 1, AllowInsecureImages: true}, nil, nil), f
}

var goldenQuery = Ref{Query: &Query{Properties: map[string]string{"scour_model": "n3000"}, Tags: []string{"golden"}}}

// scour reads Glance as an admin, who lists every project's images: a
// tenant's private image with the operator's properties and tags must
// never be taken for the golden image, even when the operator's is
// deactivated and Glance ignored the owner filter.
func TestQueryIgnoresUntrustedOwners(t *testing.T) {
	t.Parallel()
	g, f := newFakeGlance(t, []string{"ops"}, glanceImage("op1", "ops", "deactivated"), glanceImage("evil", "tenant", "active"))
	m, err := g.find(t.Context(), sc2(t, g), goldenQuery)
	if ReasonOf(err) != ReasonNotFound {
		t.Fatalf("only a tenant's image active: got %v, %v; want not_found", m, err)
	}
	for _, want := range []string{"evil", "owner tenant", "images.glance.owners", "op1 (n3000-op1, deactivated)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	var e *Error
	if errors.As(err, &e) && strings.Contains(strings.Join(e.Candidates, " "), "evil") {
		t.Errorf("untrusted image among the candidates: %v", e.Candidates)
	}
	if !strings.Contains(f.seen[0], "owner=ops") {
		t.Errorf("list query %q does not ask Glance for owner=ops", f.seen[0])
	}

	// Both active: the operator's is the one match, not an ambiguity.
	g, _ = newFakeGlance(t, []string{"ops", "ops2"}, glanceImage("op1", "ops", "active"), glanceImage("evil", "tenant", "active"))
	m, err = g.find(t.Context(), sc2(t, g), goldenQuery)
	if err != nil || m.ID != "op1" {
		t.Fatalf("operator's and tenant's images active: got %+v, %v; want op1", m, err)
	}
}

// An image named by id must belong to a trusted project.
func TestIDOfUntrustedOwnerRefused(t *testing.T) {
	t.Parallel()
	g, _ := newFakeGlance(t, []string{"ops"}, glanceImage("op1", "ops", "active"), glanceImage("evil", "tenant", "active"))
	_, err := g.Fetch(t.Context(), Ref{ID: "evil"})
	if ReasonOf(err) != ReasonUntrustedOwner {
		t.Fatalf("tenant's image by id: %v, want untrusted_owner", err)
	}
	for _, want := range []string{"evil", `"tenant"`, "images.glance.owners"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	m, err := g.find(t.Context(), sc2(t, g), Ref{ID: "op1"})
	if err != nil || m.ID != "op1" {
		t.Fatalf("operator's image by id: %+v, %v", m, err)
	}
}

// Without trusted projects no Glance image is used at all.
func TestNoOwnersRefusesEveryGlanceImage(t *testing.T) {
	t.Parallel()
	g, _ := newFakeGlance(t, nil, glanceImage("op1", "ops", "active"))
	for _, ref := range []Ref{{ID: "op1"}, goldenQuery} {
		_, err := g.Fetch(t.Context(), ref)
		if ReasonOf(err) != ReasonInvalid || !strings.Contains(err.Error(), "images.glance.owners") {
			t.Errorf("%s with no owners: %v, want invalid naming images.glance.owners", ref, err)
		}
	}
}

// An image Glance hashed with md5 (os_hash_algo md5) is as weak as the
// legacy checksum: refused unless allow_md5.
func TestMD5MultihashNeedsAllowMD5(t *testing.T) {
	t.Parallel()
	c, err := OpenCache(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	m := &gimages.Image{ID: "i1", Name: "md5", Status: gimages.ImageStatusActive, SizeBytes: 10,
		Properties: map[string]any{"os_hash_algo": "md5", "os_hash_value": "abcdef0123456789abcdef0123456789"}}
	_, err = NewGlance(nil, c, GlanceConfig{}, nil, nil).check(Ref{ID: "i1"}, m)
	if ReasonOf(err) != ReasonNoMultihash || !strings.Contains(err.Error(), "allow_md5") {
		t.Fatalf("md5 multihash without allow_md5: %v, want a refusal naming allow_md5", err)
	}
	img, err := NewGlance(nil, c, GlanceConfig{AllowMD5: true}, nil, nil).check(Ref{ID: "i1"}, m)
	if err != nil || img.Checked != "md5" {
		t.Fatalf("md5 multihash with allow_md5: %+v, %v; want checked md5", img, err)
	}
}

func sc2(t *testing.T, g *Glance) *gophercloud.ServiceClient {
	t.Helper()
	sc, err := g.client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
