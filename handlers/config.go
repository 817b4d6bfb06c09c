package handlers

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes the handlers and the reconciler. Zero values take the
// defaults below; New calls setDefaults then Validate.
type Config struct {
	// Host is this scourd's host (routing key host.<Host>); a host-scoped
	// command for another host is a routing bug and is poisoned.
	Host string `yaml:"-"`
	// Node is the compute node resource provider name, stored in claims.
	Node string `yaml:"-"`
	// ReconcileInterval is the period of the full scan (default 5m),
	// jittered by ReconcileJitter (a fraction, default 0.1 = ±10%).
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	ReconcileJitter   float64       `yaml:"reconcile_jitter"`
	// ScanRetry is the wait before the first retry of a failed scan
	// (any error: Placement or the claims store unreachable, a burn, a
	// quarantine or a Cyborg read that failed), doubled after each
	// further failure and never longer than ReconcileInterval, jittered
	// like it (default 10s). A device a failed scan would have found is
	// found that much sooner than at the next interval.
	ScanRetry time.Duration `yaml:"scan_retry"`
	// ScanDebounce merges a burst of scan triggers: the first trigger
	// scans at once; one arriving less than ScanDebounce after a
	// triggered scan waits for the window's end, together with all that
	// arrive meanwhile (default 1s; 0: no debounce, every trigger scans
	// at once). Releases with a recorded claim do not wait for a scan at
	// all: their devices are read and queued directly.
	ScanDebounce *time.Duration `yaml:"scan_debounce"`
	// FollowUpDelay schedules one more scan after a triggered one, for
	// allocations Nova removes shortly after its notification (a move's
	// migration allocation). Default 30s; negative disables.
	FollowUpDelay time.Duration `yaml:"follow_up_delay"`
	// MaxConcurrentCleans bounds the cleaning runs this reconciler has in
	// flight (default 32: a run mostly waits on its device; the cleaner
	// bounds host-bound steps and may bound further per profile).
	MaxConcurrentCleans int `yaml:"max_concurrent_cleans"`
	// BackoffBase/BackoffMax bound the per-device wait after retry-later,
	// a cleaner error or a failed Placement write (defaults 1m, 30m).
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
	// StuckAfter: a run in flight longer than this is reported stuck
	// (default 2h; set it above the longest pipeline's total timeout).
	StuckAfter time.Duration `yaml:"stuck_after"`
}

func (c *Config) setDefaults() {
	if c.Node == "" {
		c.Node = c.Host
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReconcileInterval, 5*time.Minute)
	def(&c.ScanRetry, 10*time.Second)
	if c.ScanDebounce == nil {
		d := time.Second
		c.ScanDebounce = &d
	}
	def(&c.FollowUpDelay, 30*time.Second)
	def(&c.BackoffBase, time.Minute)
	def(&c.BackoffMax, 30*time.Minute)
	def(&c.StuckAfter, 2*time.Hour)
	if c.ReconcileJitter == 0 {
		c.ReconcileJitter = 0.1
	}
	if c.MaxConcurrentCleans == 0 {
		c.MaxConcurrentCleans = 32
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("host is required"))
	}
	for name, d := range map[string]time.Duration{
		"reconcile_interval": c.ReconcileInterval, "scan_debounce": deref(c.ScanDebounce),
		"scan_retry":   c.ScanRetry,
		"backoff_base": c.BackoffBase,
		"backoff_max":  c.BackoffMax, "stuck_after": c.StuckAfter,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if c.ReconcileJitter < 0 || c.ReconcileJitter >= 1 {
		errs = append(errs, fmt.Errorf("reconcile_jitter must be in [0,1), got %v", c.ReconcileJitter))
	}
	if c.MaxConcurrentCleans < 0 {
		errs = append(errs, fmt.Errorf("max_concurrent_cleans must be positive, got %d", c.MaxConcurrentCleans))
	}
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("backoff_max (%s) is below backoff_base (%s)", c.BackoffMax, c.BackoffBase))
	}
	if len(errs) > 0 {
		return fmt.Errorf("lifecycle config: %w", errors.Join(errs...))
	}
	return nil
}

func deref(d *time.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return *d
}

// SetDefaults fills every unset field (config.Section).
func (c *Config) SetDefaults() { c.setDefaults() }
