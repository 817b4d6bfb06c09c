// Package config loads scourd's configuration: one YAML file (--config,
// default /etc/scour/scour.yaml) overridden by SCOUR_* environment
// variables, defaults filled in, then validated as a whole so an operator
// sees every problem at once.
//
// Each package owns its section (a struct with SetDefaults and Validate);
// Config only lists them. Adding a section is one field below plus one
// entry in sections().
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/images"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// DefaultPath is where scourd looks for its configuration.
const DefaultPath = "/etc/scour/scour.yaml"

// Config is the whole of scour.yaml.
type Config struct {
	// Host is this compute host's name as Nova knows it ([DEFAULT] host of
	// nova-compute): payload hosts and routing keys are compared with it.
	// Default: the hostname, uncut, as Nova's own default
	// (socket.gethostname()): a machine named cmp1.example.com is
	// cmp1.example.com to Nova, not cmp1.
	Host string `yaml:"host"`
	// HostDefaulted is true when neither scour.yaml nor SCOUR_HOST set
	// host, so Host is the hostname. scourd then checks that a claims
	// store written under the short hostname (the default before scour
	// 0.2) does not go unseen.
	HostDefaulted bool `yaml:"-"`
	// Node is the compute node resource provider name in Placement
	// (nova-compute's hypervisor_hostname). Default: Host.
	Node string `yaml:"node"`

	Log  LogConfig  `yaml:"log"`
	HTTP HTTPConfig `yaml:"http"`
	Bus  bus.Config `yaml:"bus"`

	// Placement is how scourd reaches Placement (placement/).
	Placement placement.Config `yaml:"placement"`
	// Claims is the claims and cleaning-record store (claims/).
	Claims claims.Config `yaml:"claims"`
	// Hardware selects discovery (real sysfs + tools, or the simulator).
	Hardware hardware.Config `yaml:"hardware"`
	// Pipelines are the cleaning profiles (pipeline/).
	Pipelines pipeline.Config `yaml:"pipelines"`
	// Images says where steps' Glance images come from and where the
	// verified copies are cached (images/).
	Images images.Config `yaml:"images"`
	// Lifecycle tunes the handlers and the reconciler (handlers/).
	Lifecycle LifecycleConfig `yaml:"lifecycle"`
	// Admin is scourd's local admin socket (admin/), for scourctl.
	Admin admin.Config `yaml:"admin"`
}

// Section is what every configuration section implements.
type Section interface {
	SetDefaults()
	Validate() error
}

type section struct {
	key string
	s   Section
}

// sections lists the sections to default and validate. With the
// lifecycle disabled (a dispatch-only scourd), Placement, hardware and
// pipelines are neither needed nor checked.
func (c *Config) sections() []section {
	out := []section{
		{"log", &c.Log},
		{"http", &c.HTTP},
		{"bus", &c.Bus},
		{"claims", &c.Claims},
		{"lifecycle", &c.Lifecycle},
	}
	if !c.Lifecycle.Disabled() {
		out = append(out,
			section{"admin", &c.Admin},
			section{"placement", &c.Placement},
			section{"hardware", &c.Hardware},
			section{"pipelines", &c.Pipelines},
			section{"images", &c.Images},
		)
	}
	return out
}

// SetDefaults fills every unset field.
func (c *Config) SetDefaults() {
	if c.Host == "" {
		c.Host, _ = hostname()
		c.HostDefaulted = true
	}
	if c.Node == "" {
		c.Node = c.Host
	}
	if c.Placement.Node == "" {
		c.Placement.Node = c.Node
	}
	c.Lifecycle.Host, c.Lifecycle.Node = c.Host, c.Node
	for _, s := range c.sections() {
		s.s.SetDefaults()
	}
	if c.Images.CacheDir == "" && c.Claims.StatePath != "" {
		c.Images.CacheDir = filepath.Join(c.Claims.StatePath, "images")
	}
}

// Validate reports every problem of every section, one per line.
func (c *Config) Validate() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("host: empty and the hostname is unknown; set host (SCOUR_HOST)"))
	}
	if strings.ContainsAny(c.Host, " *#") {
		errs = append(errs, fmt.Errorf("host: %q contains a space, '*' or '#'", c.Host))
	}
	if c.Node == "" {
		errs = append(errs, errors.New("node: empty"))
	}
	for _, s := range c.sections() {
		if err := s.s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, brokerPorts(c.Bus.URL)...)
	if err := c.ClaimsRoutingProblem(); err != nil {
		errs = append(errs, err)
	}
	if err := c.GlanceOwnersProblem(); err != nil {
		errs = append(errs, err)
	}
	if err := c.GlanceTransportProblem(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// GlanceOwnersProblem reports steps naming a Glance image while
// images.glance.owners is empty: scour reads Glance with an account that
// may see every project's images, so it takes golden images only from the
// projects listed there (docs/images.md, Trusted projects).
func (c *Config) GlanceOwnersProblem() error {
	if len(c.Images.Glance.Owners) > 0 {
		return nil
	}
	steps := c.GlanceSteps()
	if len(steps) == 0 {
		return nil
	}
	return fmt.Errorf("%s: required, since %s name a Glance image: list the Glance project ids whose images scour may program as golden (scour reads Glance with placement's credentials, which may see every project's images)", images.OwnersKey, strings.Join(steps, ", "))
}

// GlanceSteps names the steps ("profile P step S") that take a Glance
// image, none when the lifecycle is off.
func (c *Config) GlanceSteps() []string {
	if c.Lifecycle.Disabled() {
		return nil
	}
	var steps []string
	for _, p := range c.Pipelines.Profiles {
		all := p.Pipeline.Steps
		if p.Pipeline.RetireWipe != nil {
			all = append(slices.Clip(all), *p.Pipeline.RetireWipe)
		}
		for _, s := range all {
			if images.NamesGlance(s.Args) {
				steps = append(steps, fmt.Sprintf("profile %s step %s", p.Name, s.Name))
			}
		}
	}
	return steps
}

// GlanceTransportProblem reports steps naming a Glance image while the
// configuration reaches Glance over a connection that does not protect
// it (a plain-http images.glance.endpoint, placement.insecure), unless
// images.glance.allow_insecure_images accepts that: scour checks an
// image against the hash Glance's record gives over the same connection,
// so whoever can change it can change the image and the hash together
// (docs/images.md, Transport). A catalog endpoint, OS_INSECURE and
// clouds.yaml's verify are known only once scourd has logged in: scourd
// checks them at start too (app), and every fetch refuses them.
func (c *Config) GlanceTransportProblem() error {
	g := c.Images.Glance
	if g.AllowInsecureImages {
		return nil
	}
	steps := c.GlanceSteps()
	if len(steps) == 0 {
		return nil
	}
	var why []string
	if u, err := url.Parse(g.Endpoint); g.Endpoint != "" && (err != nil || !strings.EqualFold(u.Scheme, "https")) {
		why = append(why, fmt.Sprintf("images.glance.endpoint %s is not https", g.Endpoint))
	}
	if c.Placement.Insecure {
		why = append(why, "placement.insecure: true turns certificate verification off for Glance too (it shares Placement's session)")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s name a Glance image, but %s: whoever can change that connection can replace a golden image and the hash scour checks it against together; reach Glance over https with certificate verification, or set %s: true to accept the risk", images.AllowInsecureKey, strings.Join(steps, ", "), strings.Join(why, "; "), images.AllowInsecureKey)
}

// ClaimsRoutingProblem reports bus.broadcast_routing: claims where it
// cannot work: the dispatcher then asks the claims database which hosts
// hold an instance, which is sound only with the lifecycle on and one
// PostgreSQL database for the fleet (a sqlite store knows its own host
// only). Direct mode has no dispatcher and ignores the setting.
func (c *Config) ClaimsRoutingProblem() error {
	if c.Bus.Mode == bus.ModeDirect || c.Bus.BroadcastRouting != bus.RoutingClaims {
		return nil
	}
	if c.Lifecycle.Disabled() || c.Claims.Driver != claims.DriverPostgres {
		return fmt.Errorf("bus.broadcast_routing: claims needs the lifecycle and claims.driver postgres (one database for the fleet; claims.driver is %q); set it to auto or broadcast", c.Claims.Driver)
	}
	return nil
}

// brokerPorts reports each host of bus.url whose port is not a TCP port
// (the URL parser keeps whatever follows the colon).
func brokerPorts(raw string) []error {
	u, err := broker.ParseURL(raw)
	if err != nil {
		return nil // bus.url's own error is reported by the bus section
	}
	var errs []error
	for _, ep := range u.Endpoints {
		_, port, _ := net.SplitHostPort(ep.Addr)
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("bus.url: host %s: port %q is not a number from 1 to 65535 (e.g. %s:5672; 5671 for amqps)", ep.Host, port, ep.Host))
		}
	}
	return errs
}

// Redacted returns a copy safe to log: secrets replaced.
func (c Config) Redacted() Config {
	if u, err := broker.ParseURL(c.Bus.URL); err == nil {
		c.Bus.URL = u.String()
	} else {
		c.Bus.URL = broker.Redact(c.Bus.URL)
	}
	if c.Placement.Token != "" {
		c.Placement.Token = "(hidden)"
	}
	if c.Claims.DSN != "" {
		c.Claims.DSN = claims.RedactDSN(c.Claims.DSN)
	}
	return c
}

// hostname gives host's default (tests replace it). On an error it is
// empty and Validate says to set host.
var hostname = os.Hostname

// LogConfig is the `log` section.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // json | text
}

func (l *LogConfig) SetDefaults() {
	if l.Level == "" {
		l.Level = "info"
	}
	if l.Format == "" {
		l.Format = "json"
	}
}

func (l *LogConfig) Validate() error {
	var errs []error
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not debug, info, warn or error", l.Level))
	}
	if l.Format != "json" && l.Format != "text" {
		errs = append(errs, fmt.Errorf("log.format: %q is not json or text", l.Format))
	}
	return errors.Join(errs...)
}

// HTTPConfig is the `http` section: the /metrics, /healthz, /readyz listener.
type HTTPConfig struct {
	Address string `yaml:"address"`
}

func (h *HTTPConfig) SetDefaults() {
	if h.Address == "" {
		h.Address = ":9464"
	}
}

func (h *HTTPConfig) Validate() error {
	_, port, err := net.SplitHostPort(h.Address)
	if err != nil {
		return fmt.Errorf("http.address: %q is not host:port (e.g. :9464 or 127.0.0.1:9464)", h.Address)
	}
	// A number from 0 (any free port) to 65535, or a service name of
	// /etc/services: what the listener accepts; nothing is resolved over
	// the network.
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("http.address: port %q of %q is not a number from 1 to 65535 (e.g. :9464)", port, h.Address)
	}
	return nil
}

// LifecycleConfig is the `lifecycle` section: the handlers' and the
// reconciler's tuning, plus whether this scourd acts on commands at all.
type LifecycleConfig struct {
	// Enabled (default true) makes this scourd clean its host's devices.
	// false runs only the notification path (dispatch, and logging of the
	// commands addressed to this host), for a dispatch-only node.
	Enabled         *bool `yaml:"enabled"`
	handlers.Config `yaml:",inline"`
}

// Disabled reports an explicit enabled: false.
func (l *LifecycleConfig) Disabled() bool { return l.Enabled != nil && !*l.Enabled }

func (l *LifecycleConfig) SetDefaults() {
	if l.Enabled == nil {
		t := true
		l.Enabled = &t
	}
	l.Config.SetDefaults()
}

func (l *LifecycleConfig) Validate() error {
	if err := l.Config.Validate(); err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	return nil
}
