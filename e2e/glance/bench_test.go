package glance

import (
	"crypto/rand"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/images"
)

// benchSize is the image `make bench-images` fetches: a firmware or
// bitstream of realistic size.
const benchSize = 128 << 20

// BenchmarkImages (make bench-images) measures, in the same run against
// the same image in the local Glance: curl | sha512sum (the floor: one
// HTTP read and one hash) alternating with scour's fetch-and-verify into
// an empty cache, then a cache hit (Glance's record read, the cached file
// re-hashed; it must download no image byte).
func BenchmarkImages(b *testing.B) {
	g := harness.StartGlance(b)
	data := make([]byte, benchSize)
	_, _ = rand.Read(data)
	id := g.Upload(b, harness.GlanceImage{Name: "bench", Properties: map[string]string{"scour_model": unique()}, Data: data})
	want := g.Image(b, id)["os_hash_value"].(string)
	sc := images.EndpointClient(g.BackendURL(), "", http.Client{})

	// curl | sha512sum and scour's fetch alternate, so that both see the
	// same load on a shared machine; each fetch starts from an empty cache.
	b.Run("fetch-vs-curl", func(b *testing.B) {
		var curl, fetch time.Duration
		for b.Loop() {
			t0 := time.Now()
			out, err := exec.Command("sh", "-c", "curl -sf "+g.BackendURL()+"/v2/images/"+id+"/file | sha512sum").Output()
			if err != nil || !strings.HasPrefix(string(out), want) {
				b.Fatalf("curl | sha512sum: %v %q", err, out)
			}
			curl += time.Since(t0)
			c, err := images.OpenCache(b.TempDir(), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			src := images.NewGlance(images.StaticClient(sc), c, images.GlanceConfig{Owners: []string{harness.GlanceOwner}, AllowInsecureImages: true}, nil, nil)
			t0 = time.Now()
			if img, err := src.Fetch(b.Context(), images.Ref{ID: id}); err != nil || img.Cached {
				b.Fatalf("fetch: %+v %v", img, err)
			}
			fetch += time.Since(t0)
		}
		mb := float64(benchSize) / 1e6 * float64(b.N)
		b.ReportMetric(mb/curl.Seconds(), "curl-MB/s")
		b.ReportMetric(mb/fetch.Seconds(), "fetch-MB/s")
		b.ReportMetric(curl.Seconds()/fetch.Seconds(), "fetch/curl")
		b.ReportMetric(fetch.Seconds()/float64(b.N)*1e3, "fetch-ms")
	})
	b.Run("cache-hit", func(b *testing.B) {
		c, err := images.OpenCache(b.TempDir(), 1<<30)
		if err != nil {
			b.Fatal(err)
		}
		m := images.NewMetrics(nil)
		src := images.NewGlance(images.StaticClient(sc), c, images.GlanceConfig{Owners: []string{harness.GlanceOwner}, AllowInsecureImages: true}, m, nil)
		if _, err := src.Fetch(b.Context(), images.Ref{ID: id}); err != nil {
			b.Fatal(err)
		}
		before := readBytes(m)
		b.SetBytes(benchSize)
		t0 := time.Now()
		for b.Loop() {
			if img, err := src.Fetch(b.Context(), images.Ref{ID: id}); err != nil || !img.Cached {
				b.Fatalf("cache hit: %+v %v", img, err)
			}
		}
		if n := readBytes(m) - before; n != 0 {
			b.Fatalf("cache hits downloaded %v bytes", n)
		}
		b.ReportMetric(float64(time.Since(t0).Milliseconds())/float64(b.N), "hit-ms")
	})
}

func readBytes(m *images.Metrics) float64 {
	return testutil.ToFloat64(m.Bytes())
}
