package images

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
)

// AllowInsecureKey is the setting that accepts Glance images over a
// connection that does not protect them.
const AllowInsecureKey = "images.glance.allow_insecure_images"

// transportRisk says why the bytes and the hash of an image read through
// sc could both be replaced on the way, "" when nothing does: scour checks
// an image against the hash Glance's record gives over the same
// connection, so that check proves nothing against whoever can change
// the connection. fromCatalog says sc's endpoint came from the service
// catalog of a Keystone token (images.glance.endpoint unset), which is
// then as trustworthy as the connection to Keystone.
func transportRisk(sc *gophercloud.ServiceClient, fromCatalog bool) string {
	var why []string
	if !isHTTPS(sc.Endpoint) {
		why = append(why, fmt.Sprintf("Glance's endpoint %s is not https", sc.Endpoint))
	}
	if pc := sc.ProviderClient; pc != nil {
		if verifyOff(pc.HTTPClient.Transport) {
			why = append(why, "TLS certificate verification is off (placement.insecure, OS_INSECURE, or the clouds.yaml entry's verify: false)")
		}
		if id := pc.IdentityBase; fromCatalog && id != "" && !isHTTPS(id) {
			why = append(why, fmt.Sprintf("the service catalog that names Glance comes from Keystone at %s, which is not https", id))
		}
	}
	return strings.Join(why, "; ")
}

func isHTTPS(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && strings.EqualFold(u.Scheme, "https") && u.Host != ""
}

// verifyOff reports whether rt (through the wrappers that say what they
// wrap: Unwrap) skips TLS certificate verification.
func verifyOff(rt http.RoundTripper) bool {
	for i := 0; rt != nil && i < 16; i++ {
		switch t := rt.(type) {
		case *http.Transport:
			return t.TLSClientConfig != nil && t.TLSClientConfig.InsecureSkipVerify
		case interface{ Unwrap() http.RoundTripper }:
			rt = t.Unwrap()
		default:
			return false
		}
	}
	return false
}

// InsecureTransport says what would let someone on the path to Glance
// replace an image and its hash together ("" when nothing does), for the
// client Fetch would use; an error when there is no client yet (the
// catalog lacks Glance: Fetch says so at its first use). scourd asks it at
// start when a step names a Glance image, and refuses to start unless
// images.glance.allow_insecure_images is set.
func (g *Glance) InsecureTransport(ctx context.Context) (string, error) {
	sc, err := g.client(ctx)
	if err != nil {
		return "", err
	}
	return transportRisk(sc, g.cfg.Endpoint == ""), nil
}
