package placement

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"time"
)

// Config says how to reach Placement and which names scour uses there.
//
// Authentication, in order of precedence:
//  1. Endpoint + Token: a fixed Placement URL and a static token (noauth2
//     deployments and tests send "admin"). No Keystone.
//  2. Cloud (or OS_CLOUD): an entry of clouds.yaml (+ secure.yaml), found
//     like python-openstackclient does (OS_CLIENT_CONFIG_FILE, ./,
//     ~/.config/openstack, /etc/openstack) or at CloudsFile. Password,
//     token and application-credential auth types all work.
//  3. OS_* environment variables of an openrc, read as the openstack CLI
//     reads them (user and project domains, default domain, application
//     credentials; see keystoneOptions).
//
// With Keystone the token is re-authenticated transparently on expiry.
// Endpoint without Token, with Keystone auth, overrides the catalog URL.
type Config struct {
	// Node is this host's compute node name (Nova's nodename), which is the
	// compute node resource provider's name.
	Node string `yaml:"node"`

	Cloud      string `yaml:"cloud"`       // clouds.yaml entry; "" = OS_CLOUD
	CloudsFile string `yaml:"clouds_file"` // explicit clouds.yaml path
	Endpoint   string `yaml:"endpoint"`    // Placement URL, bypasses the catalog
	Token      string `yaml:"token"`       // static token (with Endpoint)
	Region     string `yaml:"region"`
	// Interface is the catalog interface: public, internal or admin.
	// Default: the clouds.yaml entry's or OS_INTERFACE, else internal.
	Interface string `yaml:"interface"`

	CACert   string `yaml:"cacert"`
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	Insecure bool   `yaml:"insecure"`

	// OneTimeUseTrait marks OTU devices (default HW_PCI_ONE_TIME_USE).
	OneTimeUseTrait string `yaml:"one_time_use_trait"`
	// QuarantineTrait marks devices that must not return to the pool
	// (default CUSTOM_SCOUR_QUARANTINED).
	QuarantineTrait string `yaml:"quarantine_trait"`
	// PublishCapabilityTraits is ignored (scourd warns at start): Nova
	// replaces the traits of its PCI device providers on every update, so
	// capability traits go in Nova's [pci] device_spec (scourctl
	// nova-device-spec). Kept so that older configurations still load.
	PublishCapabilityTraits bool `yaml:"publish_capability_traits"`
	// Cyborg recognizes Cyborg's accelerator providers (cyborg.go).
	Cyborg CyborgConfig `yaml:"cyborg"`

	// RequestTimeout bounds one HTTP request (default 30s).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// Retry bounds retries of conflicts, network errors and 5xx.
	Retry RetryConfig `yaml:"retry"`
	// MaxParallelWrites bounds the writes (PUT, POST, DELETE) this
	// client has in flight at once (default 2): a Placement on sqlite, or
	// one whose database is busy, answers concurrent writes with 500
	// ("database is locked"), and each retried write is one more. Reads
	// are not bounded here.
	MaxParallelWrites int `yaml:"max_parallel_writes"`
	// CheckReuseWindow is how old a release's read of a device may be for
	// the check before its first destructive step to answer from it
	// without asking Placement (Gate.HasAllocationsAsOf; default 1s; 0:
	// never, always ask). Only a complete read showing the device dirty,
	// once. The answer is dated by the read: the pipeline starts the step
	// only while it is less than a second old, the bound every check
	// before a destructive step has, and asks again otherwise.
	CheckReuseWindow *time.Duration `yaml:"check_reuse_window"`
}

// DefaultCheckReuseWindow is placement.check_reuse_window's default. The
// pipeline never starts a destructive step on an all-clear a second old
// or more (a fresh answer that aged while the step's CHECK ran, or a
// reused read), so within a second a reused read is as fresh as any
// answer the step could start on; a longer window only makes reads that
// are then asked again.
const DefaultCheckReuseWindow = time.Second

// checkReuseWindow is CheckReuseWindow with its default applied.
func (c *Config) checkReuseWindow() time.Duration {
	if c.CheckReuseWindow == nil {
		return DefaultCheckReuseWindow
	}
	return *c.CheckReuseWindow
}

// DefaultMaxParallelWrites is placement.max_parallel_writes' default.
const DefaultMaxParallelWrites = 2

// RetryConfig is a bounded exponential backoff with jitter.
type RetryConfig struct {
	Attempts int           `yaml:"attempts"` // total tries (default 8)
	Base     time.Duration `yaml:"base"`     // first wait (default 50ms)
	Max      time.Duration `yaml:"max"`      // cap per wait (default 2s)
	Budget   time.Duration `yaml:"budget"`   // total time (default 30s)
}

const (
	DefaultOneTimeUseTrait = "HW_PCI_ONE_TIME_USE"
	DefaultQuarantineTrait = "CUSTOM_SCOUR_QUARANTINED"
)

func (c *Config) setDefaults() {
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	if c.OneTimeUseTrait == "" {
		c.OneTimeUseTrait = DefaultOneTimeUseTrait
	}
	if c.QuarantineTrait == "" {
		c.QuarantineTrait = DefaultQuarantineTrait
	}
	c.Cyborg.setDefaults()
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.Retry.Attempts == 0 {
		c.Retry.Attempts = 8
	}
	if c.Retry.Base == 0 {
		c.Retry.Base = 50 * time.Millisecond
	}
	if c.Retry.Max == 0 {
		c.Retry.Max = 2 * time.Second
	}
	if c.Retry.Budget == 0 {
		c.Retry.Budget = 30 * time.Second
	}
	if c.MaxParallelWrites == 0 {
		c.MaxParallelWrites = DefaultMaxParallelWrites
	}
	if c.CheckReuseWindow == nil {
		w := DefaultCheckReuseWindow
		c.CheckReuseWindow = &w
	}
}

var traitRE = regexp.MustCompile(`^[A-Z0-9_]{1,255}$`)

// Validate reports every problem at once. It never prints secrets.
func (c *Config) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if c.Node == "" {
		bad("placement.node: empty; set it to this host's Nova compute node name")
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("placement.endpoint: %q is not an http(s) URL", c.Endpoint)
		}
	}
	if c.Token != "" && c.Endpoint == "" {
		bad("placement.token: a static token needs placement.endpoint (the catalog is not consulted)")
	}
	if (c.Cert == "") != (c.Key == "") {
		bad("placement.cert and placement.key: set both or neither")
	}
	for _, f := range []struct{ name, path string }{{"cacert", c.CACert}, {"cert", c.Cert}, {"key", c.Key}, {"clouds_file", c.CloudsFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			bad("placement.%s: %v", f.name, err)
		}
	}
	switch c.Interface {
	case "", "public", "internal", "admin": // "": clouds.yaml's or OS_INTERFACE, else internal
	default:
		bad("placement.interface: %q is not public, internal or admin", c.Interface)
	}
	if !traitRE.MatchString(c.OneTimeUseTrait) {
		bad("placement.one_time_use_trait: %q is not a trait name (A-Z, 0-9, _)", c.OneTimeUseTrait)
	}
	if !traitRE.MatchString(c.QuarantineTrait) || !isCustom(c.QuarantineTrait) {
		bad("placement.quarantine_trait: %q must be a CUSTOM_ trait name", c.QuarantineTrait)
	}
	if c.QuarantineTrait == c.OneTimeUseTrait {
		bad("placement.quarantine_trait: must differ from one_time_use_trait")
	}
	if c.MaxParallelWrites < 0 {
		bad("placement.max_parallel_writes: %d is negative; set 1 or more (0: the default, %d)", c.MaxParallelWrites, DefaultMaxParallelWrites)
	}
	if c.CheckReuseWindow != nil && *c.CheckReuseWindow < 0 {
		bad("placement.check_reuse_window: %s is negative; set 0 (never reuse a read: always ask Placement) or a duration such as 1s", *c.CheckReuseWindow)
	}
	c.Cyborg.validate(c.OneTimeUseTrait, c.QuarantineTrait, bad)
	if c.Cyborg.ARQs() && c.Token != "" && c.Cyborg.Endpoint == "" {
		bad("placement.cyborg.endpoint: empty with a static placement.token, which reads no catalog; set Cyborg's API URL (.../v2) or placement.cyborg.read_arqs: false")
	}
	if c.RequestTimeout < 0 {
		bad("placement.request_timeout: negative")
	}
	r := c.Retry
	if r.Attempts < 1 || r.Base <= 0 || r.Max < r.Base || r.Budget <= 0 {
		bad("placement.retry: want attempts >= 1, 0 < base <= max, budget > 0 (got %d, %s, %s, %s)", r.Attempts, r.Base, r.Max, r.Budget)
	}
	return errors.Join(errs...)
}

func isCustom(t string) bool { return len(t) > 7 && t[:7] == "CUSTOM_" }

// SetDefaults fills every unset field (config.Section).
func (c *Config) SetDefaults() { c.setDefaults() }
