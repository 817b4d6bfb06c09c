package images

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// servedImage is an image a dataGlance serves: its record and, unless
// body says otherwise, its bytes.
type servedImage struct {
	meta map[string]any
	data []byte
	// body, when set, answers GET .../file instead (a cut connection).
	body func(w http.ResponseWriter)
}

// dataGlance answers GET /v2/images/{id} and GET /v2/images/{id}/file
// for its images and counts the downloads.
type dataGlance struct {
	images    map[string]*servedImage
	downloads atomic.Int32
}

func (f *dataGlance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for id, img := range f.images {
		switch r.URL.Path {
		case "/v2/images/" + id:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(img.meta)
			return
		case "/v2/images/" + id + "/file":
			f.downloads.Add(1)
			if img.body != nil {
				img.body(w)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(img.data)
			return
		}
	}
	http.NotFound(w, r)
}

// served is an active image of project ops holding data, hashed with
// sha512 as Glance hashes it.
func served(id string, data []byte) *servedImage {
	sum := sha512.Sum512(data)
	return &servedImage{data: data, meta: map[string]any{"id": id, "name": "golden-" + id, "status": "active", "owner": "ops",
		"size": len(data), "os_hash_algo": "sha512", "os_hash_value": hex.EncodeToString(sum[:]), "bitstream_id": "0x1"}}
}

// newDataGlance serves imgs over plain http to a Glance source whose
// cache lives in cacheDir (max bytes); cfg gets owners [ops].
func newDataGlance(t *testing.T, cacheDir string, max int64, cfg GlanceConfig, imgs ...*servedImage) (*Glance, *dataGlance) {
	t.Helper()
	f := &dataGlance{images: map[string]*servedImage{}}
	for _, img := range imgs {
		f.images[img.meta["id"].(string)] = img
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := OpenCache(cacheDir, max)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Owners = []string{"ops"}
	cfg.AllowInsecureImages = true // the test server speaks http
	return NewGlance(StaticClient(EndpointClient(srv.URL, "", http.Client{})), c, cfg, nil, nil), f
}

// os_hash_value names the cache entry: a value that is not the hex of
// its algorithm's digest ("../../victim", from a damaged record or
// whoever answers for Glance) is refused before it reaches a file name,
// so no file outside the cache is hashed or removed. (Found in review:
// the cache hashed the victim, found it corrupt and removed it.)
func TestHashValueNeverNamesAFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"../../victim", strings.Repeat("ab", 32) /* sha256's length */, strings.Repeat("g", 128), "/" + strings.Repeat("a", 127)} {
		img := served("i1", []byte("whatever"))
		img.meta["os_hash_value"] = v
		g, f := newDataGlance(t, filepath.Join(root, "cache"), 1<<20, GlanceConfig{Attempts: 1}, img)
		_, err := g.Fetch(t.Context(), Ref{ID: "i1"})
		if ReasonOf(err) != ReasonNoMultihash || !strings.Contains(err.Error(), "hex") {
			t.Errorf("os_hash_value %q: %v, want a no_multihash refusal saying it is not hex", v, err)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
			t.Fatalf("os_hash_value %q: the file outside the cache is gone or changed: %q, %v", v, b, err)
		}
		if n := f.downloads.Load(); n != 0 {
			t.Errorf("os_hash_value %q: %d downloads, want none", v, n)
		}
	}
	// The cache itself refuses such a key too.
	c, _ := OpenCache(filepath.Join(root, "cache2"), 1<<20)
	if _, ok, err := c.get("sha512", "../../victim", 8); ok || err == nil {
		t.Errorf("cache get of ../../victim: ok %v, err %v; want an error", ok, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("victim: %v", err)
	}
	// Glance's own value, in any case, is still taken.
	img := served("i2", []byte("golden"))
	img.meta["os_hash_value"] = strings.ToUpper(img.meta["os_hash_value"].(string))
	g, _ := newDataGlance(t, filepath.Join(root, "cache3"), 1<<20, GlanceConfig{Attempts: 1}, img)
	if _, err := g.Fetch(t.Context(), Ref{ID: "i2"}); err != nil {
		t.Errorf("an upper-case sha512 value: %v, want it taken (lower-cased)", err)
	}
}

// An image Fetch returned stays in the cache until its user releases
// it: fetching another image that does not fit beside it must not evict
// the file the first step is about to program (found in review: the
// path Fetch returned could be gone before the step used it). Once
// released, it is evicted as before.
func TestFetchedImageIsNotEvictedUntilReleased(t *testing.T) {
	t.Parallel()
	a, b, c := served("a", []byte(strings.Repeat("A", 600))), served("b", []byte(strings.Repeat("B", 600))), served("c", []byte(strings.Repeat("C", 600)))
	g, _ := newDataGlance(t, t.TempDir(), 1000, GlanceConfig{Attempts: 1}, a, b, c)
	ia, err := g.Fetch(t.Context(), Ref{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := g.Fetch(t.Context(), Ref{ID: "b"}) // does not fit beside a
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(ia.Path); err != nil || string(got) != strings.Repeat("A", 600) {
		t.Fatalf("image a evicted while in use: %v", err)
	}
	// A second user of a cache hit holds it too.
	ia2, err := g.Fetch(t.Context(), Ref{ID: "a"})
	if err != nil || !ia2.Cached {
		t.Fatalf("second fetch of a: %+v, %v", ia2, err)
	}
	ia.Release()
	ia.Release() // more calls do nothing
	ib.Release()
	if _, err := g.Fetch(t.Context(), Ref{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ia.Path); err != nil {
		t.Fatalf("image a evicted while its second user holds it: %v", err)
	}
	if _, err := os.Stat(ib.Path); err == nil {
		t.Error("image b, released, was not evicted to make room for c")
	}
	ia2.Release()
	if _, err := g.Fetch(t.Context(), Ref{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ia.Path); err == nil {
		t.Error("image a, released by both users, was never evicted")
	}
}
