package images

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// unwrapping is a transport wrapper that says what it wraps, as
// placement's session transport does.
type unwrapping struct{ next http.RoundTripper }

func (u unwrapping) RoundTrip(r *http.Request) (*http.Response, error) { return u.next.RoundTrip(r) }
func (u unwrapping) Unwrap() http.RoundTripper                         { return u.next }

// scour checks a Glance image against the hash Glance's record gives
// over the same connection: over plain http, over TLS without
// certificate verification, or with the endpoint from a catalog Keystone
// served over plain http, whoever can change the connection changes both,
// and the check passes. Such an image is refused (nothing is requested
// from Glance) unless images.glance.allow_insecure_images says the
// operator accepts that. (Found in review: plain http was accepted
// silently.)
func TestGlanceOverAnInsecureConnectionIsRefused(t *testing.T) {
	t.Parallel()
	img := served("i1", []byte("golden"))
	f := &dataGlance{images: map[string]*servedImage{"i1": img}}
	plain := httptest.NewServer(f)
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(f)
	t.Cleanup(tlsSrv.Close)
	noVerify := http.Client{Transport: unwrapping{&http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} //nolint:gosec // what is refused
	fromHTTPKeystone := EndpointClient(tlsSrv.URL, "", *tlsSrv.Client())
	fromHTTPKeystone.ProviderClient.IdentityBase = "http://keystone.example:5000/"

	for _, tc := range []struct {
		name     string
		refused  string // "" = fetched
		allowed  bool
		endpoint string
	}{
		{name: "plain http", refused: "is not https"},
		{name: "TLS without verification", refused: "verification is off"},
		{name: "catalog from a plain-http Keystone", refused: "Keystone at http://keystone.example:5000/, which is not https"},
		{name: "https with verification"},
		{name: "explicit https endpoint, token from a plain-http Keystone", endpoint: tlsSrv.URL},
		{name: "plain http, allowed", allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := EndpointClient(tlsSrv.URL, "", *tlsSrv.Client())
			switch {
			case strings.HasPrefix(tc.name, "plain http"):
				sc = EndpointClient(plain.URL, "", http.Client{})
			case tc.name == "TLS without verification":
				sc = EndpointClient(tlsSrv.URL, "", noVerify)
			case strings.Contains(tc.name, "plain-http Keystone"):
				sc = fromHTTPKeystone
			}
			c, err := OpenCache(t.TempDir(), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			before := f.downloads.Load()
			g := NewGlance(StaticClient(sc), c, GlanceConfig{Owners: []string{"ops"}, Attempts: 1, AllowInsecureImages: tc.allowed, Endpoint: tc.endpoint}, nil, nil)
			_, err = g.Fetch(t.Context(), Ref{ID: "i1"})
			why, werr := g.InsecureTransport(t.Context())
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("Fetch: %v, want the image", err)
				}
				if tc.allowed != (why != "") || werr != nil {
					t.Errorf("InsecureTransport = %q, %v", why, werr)
				}
				return
			}
			if ReasonOf(err) != ReasonInsecure || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), AllowInsecureKey) {
				t.Fatalf("Fetch: %v (reason %q), want an insecure refusal saying %q and naming %s", err, ReasonOf(err), tc.refused, AllowInsecureKey)
			}
			if f.downloads.Load() != before {
				t.Error("the image was downloaded over the insecure connection")
			}
			if !strings.Contains(why, tc.refused) || werr != nil {
				t.Errorf("InsecureTransport = %q, %v; want it to say %q", why, werr, tc.refused)
			}
		})
	}
}
