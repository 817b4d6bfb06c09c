package images

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Config is scour.yaml's images section: where Glance images come from
// and the local cache. Glance is reached with placement's credentials
// (static token, clouds.yaml or OS_*), so one Keystone setup covers both.
type Config struct {
	Glance GlanceConfig `yaml:"glance"`
	// CacheDir holds verified images (default <claims.state_path>/images,
	// filled in by the app when empty).
	CacheDir string `yaml:"cache_dir"`
	// CacheMaxBytes bounds the cache (default 10 GiB). An image larger
	// than this is refused.
	CacheMaxBytes int64 `yaml:"cache_max_bytes"`
}

// GlanceConfig says how to reach Glance.
type GlanceConfig struct {
	// Endpoint is Glance's URL, bypassing the service catalog; required
	// when placement uses a static token (no Keystone, no catalog).
	Endpoint string `yaml:"endpoint"`
	// Owners are the Glance project ids whose images scour trusts as
	// golden. scour reads Glance with placement's credentials, usually
	// an admin's, which see every project's images: without this a
	// tenant's private image carrying the same properties and tags could
	// be programmed as golden. An image owned by another project is
	// refused by id and ignored by a query. Required when a step names a
	// Glance image (config.Validate checks it).
	Owners []string `yaml:"owners"`
	// AllowMD5 accepts an image without multihash (os_hash_algo/
	// os_hash_value) when its legacy md5 checksum matches; the record then
	// says the check was md5. Default false: such images are refused.
	AllowMD5 bool `yaml:"allow_md5"`
	// RequestTimeout bounds one metadata request (default 30s).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// StallTimeout is how long a download may go without receiving a
	// byte before it is abandoned and retried (default 60s).
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// AllowInsecureImages accepts Glance images reached over a connection
	// that does not protect them: plain http, TLS without certificate
	// verification, or a service catalog from a plain-http Keystone.
	// scour checks an image against the hash Glance's record gives over
	// that same connection, so whoever can change the connection can
	// change both, and the bitstream or firmware scour programs. Default
	// false: such images are refused (and scourd does not start when a
	// step names a Glance image and the configuration shows it).
	AllowInsecureImages bool `yaml:"allow_insecure_images"`
	// Attempts is how many times a request or download is tried while
	// Glance is unreachable or answers 5xx (default 4); Backoff the first
	// wait between tries, doubling (default 1s).
	Attempts int           `yaml:"attempts"`
	Backoff  time.Duration `yaml:"backoff"`
}

// DefaultCacheMaxBytes is 10 GiB.
const DefaultCacheMaxBytes = 10 << 30

// SetDefaults fills every unset field but CacheDir (config.Section).
func (c *Config) SetDefaults() {
	if c.CacheMaxBytes == 0 {
		c.CacheMaxBytes = DefaultCacheMaxBytes
	}
	g := &c.Glance
	if g.RequestTimeout == 0 {
		g.RequestTimeout = 30 * time.Second
	}
	if g.StallTimeout == 0 {
		g.StallTimeout = 60 * time.Second
	}
	if g.Attempts == 0 {
		g.Attempts = 4
	}
	if g.Backoff == 0 {
		g.Backoff = time.Second
	}
}

// Validate reports every problem at once (config.Section).
func (c *Config) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if c.CacheMaxBytes < 0 {
		bad("images.cache_max_bytes: negative")
	}
	g := c.Glance
	for i, o := range g.Owners {
		if o == "" || strings.ContainsAny(o, " \t,") {
			bad("images.glance.owners[%d]: %q is not a Glance project id", i, o)
		}
	}
	if g.Endpoint != "" {
		if u, err := url.Parse(g.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("images.glance.endpoint: %q is not an http(s) URL", g.Endpoint)
		}
	}
	if g.RequestTimeout < 0 || g.StallTimeout < 0 || g.Backoff < 0 {
		bad("images.glance: request_timeout, stall_timeout and backoff must not be negative")
	}
	if g.Attempts < 1 {
		bad("images.glance.attempts: %d, want at least 1", g.Attempts)
	}
	return errors.Join(errs...)
}

// OwnersKey is the configuration key listing the trusted Glance projects.
const OwnersKey = "images.glance.owners"

// NamesGlance reports whether a step's args name a Glance image
// (args.image with glance_id: or glance_query:).
func NamesGlance(args map[string]any) bool {
	m, ok := args["image"].(map[string]any)
	return ok && (m["glance_id"] != nil || m["glance_query"] != nil)
}

// trusted reports whether owner is one of the trusted projects.
func (g GlanceConfig) trusted(owner string) bool {
	return owner != "" && slices.Contains(g.Owners, owner)
}
