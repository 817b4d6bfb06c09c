package glance

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/images"
)

// fixture is a Glance source over g's proxy with its own cache.
type fixture struct {
	g     *harness.Glance
	src   *images.Glance
	m     *images.Metrics
	cache string
}

func newFixture(t *testing.T, g *harness.Glance, cfg images.GlanceConfig, cacheMax int64) *fixture {
	t.Helper()
	dir := t.TempDir()
	c, err := images.OpenCache(dir, cacheMax)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Owners == nil {
		cfg.Owners = []string{harness.GlanceOwner}
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = time.Millisecond // the faults are injected: no need to wait between tries
	}
	cfg.AllowInsecureImages = true // the harness's Glance speaks plain http
	m := images.NewMetrics(prometheus.NewRegistry())
	sc := images.EndpointClient(g.URL(), "", http.Client{})
	return &fixture{g: g, m: m, cache: dir, src: images.NewGlance(images.StaticClient(sc), c, cfg, m, nil)}
}

func randomImage(t *testing.T, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	return b
}

// unique is a property value no other test's image has.
func unique() string { return uuid.NewString() }

func wantReason(t *testing.T, err error, want images.Reason, mentions ...string) *images.Error {
	t.Helper()
	var e *images.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *images.Error with reason %s", err, err, want)
	}
	if e.Reason != want {
		t.Fatalf("reason %s, want %s: %v", e.Reason, want, err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
	return e
}

// An image found by query is downloaded once, verified against Glance's
// sha512, and then served from the cache (re-hashed) without downloading
// again; by id it is the same image.
func TestGlanceImageByQueryDownloadsOnceThenHitsCache(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	data := randomImage(t, 3<<20)
	model := unique()
	id := g.Upload(t, harness.GlanceImage{Name: "golden-" + model, Properties: map[string]string{"scour_model": model}, Tags: []string{"golden"}, Data: data})

	ref := images.Ref{Query: &images.Query{Properties: map[string]string{"scour_model": model}, Tags: []string{"golden"}}}
	img, err := f.src.Fetch(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(data)
	if img.ID != id || img.HashAlgo != "sha512" || img.HashValue != hex.EncodeToString(sum[:]) || img.Size != int64(len(data)) ||
		img.Checked != "sha512" || img.Source != "glance" || img.Name != "golden-"+model || img.Properties["scour_model"] != model || img.Cached {
		t.Fatalf("image %+v, want id %s, sha512 of the upload, %d bytes, from the network", img, id, len(data))
	}
	if got, _ := os.ReadFile(img.Path); !bytes.Equal(got, data) {
		t.Fatalf("%s does not hold the uploaded bytes", img.Path)
	}
	if !strings.HasPrefix(img.Path, f.cache) {
		t.Fatalf("image at %s, not in the cache %s", img.Path, f.cache)
	}

	before, _ := g.Requests()
	again, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := g.Requests()
	if !again.Cached || again.Path != img.Path || again.HashValue != img.HashValue {
		t.Fatalf("second fetch %+v, want the cached copy of %s", again, img.Path)
	}
	if after-before != 1 {
		t.Fatalf("second fetch made %d requests to Glance, want 1 (the image's record, no download)", after-before)
	}
	if n := testutil.ToFloat64(f.mDownloads()); n != 1 {
		t.Fatalf("downloads %v, want 1", n)
	}
	rec := img.Record()
	if rec["id"] != id || rec["hash_algo"] != "sha512" || rec["size"] != int64(len(data)) || rec["checked"] != "sha512" {
		t.Fatalf("record %v", rec)
	}
}

// Bytes changed in Glance's file store behind its back: the hash check
// refuses the image, nothing reaches the cache, and the metric counts it.
// This test fails when the hash comparison is removed.
func TestGlanceTamperedImageIsRefused(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	id := g.Upload(t, harness.GlanceImage{Name: "tampered", Properties: map[string]string{"scour_model": unique()}, Data: randomImage(t, 1<<20)})
	g.Tamper(t, id, 4096)

	_, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	e := wantReason(t, err, images.ReasonHashMismatch, id, "behind Glance's back", "nothing is programmed")
	if e.Recoverable() {
		t.Fatal("a hash mismatch must not be recoverable by waiting")
	}
	if entries := f.cacheEntries(t); len(entries) != 0 {
		t.Fatalf("cache holds %v after a refused image", entries)
	}
	if n := testutil.ToFloat64(f.mRefused(images.ReasonHashMismatch)); n != 1 {
		t.Fatalf("refused{hash_mismatch} = %v, want 1", n)
	}
}

// A query must match exactly one active image: none and two are refused,
// naming what matched.
func TestGlanceQueryMatchingZeroOrTwoImages(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	model := unique()
	a := g.Upload(t, harness.GlanceImage{Name: "a", Properties: map[string]string{"scour_model": model}, Data: randomImage(t, 1024)})
	b := g.Upload(t, harness.GlanceImage{Name: "b", Properties: map[string]string{"scour_model": model}, Data: randomImage(t, 1024)})

	_, err := f.src.Fetch(t.Context(), images.Ref{Query: &images.Query{Properties: map[string]string{"scour_model": model}}})
	e := wantReason(t, err, images.ReasonAmbiguous, a, b, "exactly one")
	if len(e.Candidates) != 2 {
		t.Fatalf("candidates %v, want both images", e.Candidates)
	}
	_, err = f.src.Fetch(t.Context(), images.Ref{Query: &images.Query{Properties: map[string]string{"scour_model": unique()}}})
	wantReason(t, err, images.ReasonNotFound, "no active Glance image matches")

	// Deactivating one leaves exactly one active match; the other is named.
	g.Deactivate(t, b)
	img, err := f.src.Fetch(t.Context(), images.Ref{Query: &images.Query{Properties: map[string]string{"scour_model": model}}})
	if err != nil || img.ID != a {
		t.Fatalf("after deactivating %s: %+v, %v; want %s", b, img, err, a)
	}
}

// Another project's image with the operator's properties and tags (a
// tenant's private upload, which scour's admin credentials can list) is
// never taken for the golden image: ignored by a query while the
// operator's is active and once it is deactivated, refused by id.
func TestGlanceImageOfAnotherProjectIsNotTrusted(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	model := unique()
	props := map[string]string{"scour_model": model, "bitstream_id": "0xgolden"}
	ops := g.Upload(t, harness.GlanceImage{Name: "golden", Tags: []string{"golden"}, Properties: props, Data: randomImage(t, 1024)})
	evil := g.Upload(t, harness.GlanceImage{Name: "golden", Tags: []string{"golden"}, Owner: "tenant-project",
		Properties: map[string]string{"scour_model": model, "bitstream_id": "0xevil"}, Data: randomImage(t, 1024)})
	if o := g.Image(t, evil)["owner"]; o != "tenant-project" {
		t.Fatalf("harness: the tenant's image is owned by %v", o)
	}
	q := images.Ref{Query: &images.Query{Properties: map[string]string{"scour_model": model}, Tags: []string{"golden"}}}
	img, err := f.src.Fetch(t.Context(), q)
	if err != nil || img.ID != ops || img.Properties["bitstream_id"] != "0xgolden" {
		t.Fatalf("both active: %+v, %v; want the operator's %s", img, err, ops)
	}
	g.Deactivate(t, ops)
	_, err = f.src.Fetch(t.Context(), q)
	e := wantReason(t, err, images.ReasonNotFound, ops, evil, "owner tenant-project", "images.glance.owners")
	if strings.Contains(strings.Join(e.Candidates, " "), evil) {
		t.Errorf("the tenant's image is a candidate: %v", e.Candidates)
	}
	_, err = f.src.Fetch(t.Context(), images.Ref{ID: evil})
	wantReason(t, err, images.ReasonUntrustedOwner, evil, "tenant-project", "images.glance.owners")
}

// An image deactivated or deleted between runs is refused, even though a
// verified copy is still in the cache.
func TestGlanceImageDeactivatedOrDeletedBetweenRuns(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	id := g.Upload(t, harness.GlanceImage{Name: "soon-gone", Properties: map[string]string{"scour_model": unique()}, Data: randomImage(t, 8192)})
	if _, err := f.src.Fetch(t.Context(), images.Ref{ID: id}); err != nil {
		t.Fatal(err)
	}
	g.Deactivate(t, id)
	_, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	wantReason(t, err, images.ReasonNotActive, id, "deactivated")
	g.Delete(t, id)
	_, err = f.src.Fetch(t.Context(), images.Ref{ID: id})
	wantReason(t, err, images.ReasonNotFound, id)
}

// An image larger than the whole cache is refused before any download.
func TestGlanceImageLargerThanCache(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 64<<10)
	id := g.Upload(t, harness.GlanceImage{Name: "big", Properties: map[string]string{"scour_model": unique()}, Data: randomImage(t, 128<<10)})
	_, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	wantReason(t, err, images.ReasonTooLarge, "cache_max_bytes")
	if n := testutil.ToFloat64(f.mBytes()); n != 0 {
		t.Fatalf("downloaded %v bytes of an image the cache cannot hold", n)
	}
}

// A cache file corrupted on disk is detected on use and fetched again.
func TestGlanceCorruptedCacheFileIsFetchedAgain(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	f := newFixture(t, g, images.GlanceConfig{}, 1<<30)
	data := randomImage(t, 64<<10)
	id := g.Upload(t, harness.GlanceImage{Name: "corrupt-cache", Properties: map[string]string{"scour_model": unique()}, Data: data})
	img, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(img.Path, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(data)
	bad[100] ^= 0xff
	if err := os.WriteFile(img.Path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if again.Cached {
		t.Fatal("a corrupted cache entry was served as a cache hit")
	}
	if got, _ := os.ReadFile(again.Path); !bytes.Equal(got, data) {
		t.Fatal("the refetched image does not hold the uploaded bytes")
	}
	if n := testutil.ToFloat64(f.m.Fetches("cache_corrupt")); n != 1 {
		t.Fatalf("fetches{cache_corrupt} = %v, want 1", n)
	}
}

// Glance answering 500, unreachable, or stalling mid-download: bounded
// retries, then a recoverable refusal (the device stays reserved, the
// run is tried later); once Glance is back the image is fetched.
func TestGlanceUnavailable(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	id := g.Upload(t, harness.GlanceImage{Name: "flaky", Properties: map[string]string{"scour_model": unique()}, Data: randomImage(t, 256<<10)})
	for _, tc := range []struct {
		name  string
		fault harness.Fault
	}{
		{"500", harness.Fault{Status: http.StatusInternalServerError}},
		{"stalled download", harness.Fault{StallBody: true, PathSuffix: "/file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, g, images.GlanceConfig{Attempts: 3, StallTimeout: 300 * time.Millisecond}, 1<<30)
			g.Inject(tc.fault)
			defer g.Heal()
			_, before := g.Requests()
			_, err := f.src.Fetch(t.Context(), images.Ref{ID: id})
			e := wantReason(t, err, images.ReasonUnavailable, "tried again later")
			if !e.Recoverable() {
				t.Fatal("an unavailable Glance must be recoverable")
			}
			if _, after := g.Requests(); after-before < 3 {
				t.Fatalf("%d faulted requests, want the 3 attempts", after-before)
			}
			if entries := f.cacheEntries(t); len(entries) != 0 {
				t.Fatalf("cache holds %v after a failed download", entries)
			}
			g.Heal()
			if _, err := f.src.Fetch(t.Context(), images.Ref{ID: id}); err != nil {
				t.Fatalf("after Glance healed: %v", err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		dir := t.TempDir()
		c, _ := images.OpenCache(dir, 1<<30)
		// A port nothing listens on: the connection is refused at once.
		sc := images.EndpointClient("http://127.0.0.1:1", "", http.Client{})
		src := images.NewGlance(images.StaticClient(sc), c, images.GlanceConfig{Owners: []string{harness.GlanceOwner}, Attempts: 2, Backoff: time.Millisecond, AllowInsecureImages: true}, nil, nil)
		_, err := src.Fetch(t.Context(), images.Ref{ID: id})
		wantReason(t, err, images.ReasonUnavailable)
	})
}

func (f *fixture) mDownloads() prometheus.Counter { return f.m.Fetches("download") }
func (f *fixture) mBytes() prometheus.Counter     { return f.m.Bytes() }
func (f *fixture) mRefused(r images.Reason) prometheus.Counter {
	return f.m.Refused(r)
}

func (f *fixture) cacheEntries(t *testing.T) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(f.cache, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}
