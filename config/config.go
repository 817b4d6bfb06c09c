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
	"os"
	"strings"

	"github.com/scour-project/scour/bus"
)

// DefaultPath is where scourd looks for its configuration.
const DefaultPath = "/etc/scour/scour.yaml"

// Config is the whole of scour.yaml.
type Config struct {
	// Host is this compute host's name as Nova knows it ([DEFAULT] host of
	// nova-compute): payload hosts and routing keys are compared with it.
	// Default: the short hostname.
	Host string `yaml:"host"`
	// Node is the compute node resource provider name in Placement
	// (nova-compute's hypervisor_hostname). Default: Host.
	Node string `yaml:"node"`

	Log  LogConfig  `yaml:"log"`
	HTTP HTTPConfig `yaml:"http"`
	Bus  bus.Config `yaml:"bus"`

	// Sections added by later issues go here, each owned by its package:
	//   Placement placement.Config `yaml:"placement"`
	//   Claims    claims.Config    `yaml:"claims"`
	//   Hardware  hardware.Config  `yaml:"hardware"`
	//   Pipelines pipeline.Config  `yaml:"pipelines"`
	//   Reconcile reconcile.Config `yaml:"reconcile"`
}

// Section is what every configuration section implements.
type Section interface {
	SetDefaults()
	Validate() error
}

// sections names every section by its YAML key, in documentation order.
func (c *Config) sections() []struct {
	key string
	s   Section
} {
	return []struct {
		key string
		s   Section
	}{
		{"log", &c.Log},
		{"http", &c.HTTP},
		{"bus", &c.Bus},
	}
}

// SetDefaults fills every unset field.
func (c *Config) SetDefaults() {
	if c.Host == "" {
		c.Host = shortHostname()
	}
	if c.Node == "" {
		c.Node = c.Host
	}
	for _, s := range c.sections() {
		s.s.SetDefaults()
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
	return errors.Join(errs...)
}

// Redacted returns a copy safe to log: secrets replaced.
func (c Config) Redacted() Config {
	if u, err := bus.ParseBrokerURL(c.Bus.URL); err == nil {
		c.Bus.URL = u.String()
	} else {
		c.Bus.URL = bus.Redact(c.Bus.URL)
	}
	return c
}

func shortHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	short, _, _ := strings.Cut(h, ".")
	return short
}

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
	if !strings.Contains(h.Address, ":") {
		return fmt.Errorf("http.address: %q is not host:port", h.Address)
	}
	return nil
}
