package placement

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Client is scour's Placement gate for one compute host (Config.Node).
// It is safe for concurrent use.
type Client struct {
	cfg     Config
	sc      *gophercloud.ServiceClient
	log     *slog.Logger
	calls   atomic.Uint64
	metrics *metrics
	// writes holds one token per write in flight (MaxParallelWrites);
	// serial is one more token every write takes while a Placement that
	// answered a write with 5xx is written one request at a time
	// (writeSlot).
	writes chan struct{}
	serial chan struct{}
	// serialUntil (unix nanoseconds) ends that one-at-a-time period.
	serialUntil atomic.Int64

	mu       sync.Mutex
	nodeUUID string          // compute node RP, looked up once
	traitsOK map[string]bool // custom traits known to exist
	cyborg   map[string]bool // providers listed with a Cyborg trait (cyborg.go)
	// cyborgLists and cyborgListErr: each Cyborg listing's last success
	// and its error last logged (listManaged).
	cyborgLists   map[string][]provider
	cyborgListErr map[string]string
	shared        sharedListing // ConfirmShared's listings
	invs          invCache      // last inventory read of each device (inventory.go)
	traitsAt      traitCache    // trait facts a claim's listing proved (claimtraits.go)
	creds         credsHold     // cooldown after a credential refusal (credentials.go)
	// credFields names the credential settings in use, for a refused
	// re-authentication's error ("" with a static token).
	credFields string
	// getenv reads the OS_* variables (WithGetenv), for ServiceClient's
	// catalog lookups.
	getenv func(string) string
	now    func() time.Time

	// beforeInventoryWrite runs after Unreserve/Burn verified the device
	// and before the PUT: tests use it to race an allocation in.
	beforeInventoryWrite func(ctx context.Context, rpUUID string)
}

// Option adjusts New.
type Option func(*options)

type options struct {
	log    *slog.Logger
	reg    prometheus.Registerer
	getenv func(string) string
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithGetenv reads the OS_* variables (EnvVars) through getenv instead of
// the process's environment: scourctl passes scourd's environment file,
// where the credentials of scourd's unit live.
func WithGetenv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

// WithRegisterer registers the client's metrics there
// (scour_placement_requests_total, _retries_total, _requests_skipped_total,
// _last_scan_requests, _scan_duration_seconds, _write_wait_seconds).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// New authenticates, negotiates the microversion (GET / once) and returns a
// client. It fails when Placement offers less than MinMicroversion.
func New(ctx context.Context, cfg Config, opts ...Option) (*Client, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.getenv == nil {
		o.getenv = os.Getenv
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("placement config: %w", err)
	}
	c := &Client{cfg: cfg, log: o.log.With("component", "placement", "node", cfg.Node), traitsOK: map[string]bool{}, getenv: o.getenv, now: time.Now,
		writes: make(chan struct{}, cfg.MaxParallelWrites), serial: make(chan struct{}, 1)}
	c.metrics = newMetrics(c.writeConcurrency)
	if o.reg != nil {
		if err := c.metrics.register(o.reg); err != nil {
			return nil, fmt.Errorf("placement metrics: %w", err)
		}
	}
	// Glance and Cyborg share this session (ServiceClient): the cooldown
	// of a refused login holds for them too (credentials.go).
	held := func(next http.RoundTripper) http.RoundTripper { return &heldTransport{next: next, c: c} }
	sc, fields, err := newServiceClient(ctx, cfg, o.getenv, held)
	if err != nil {
		return nil, err
	}
	c.sc, c.credFields = sc, fields
	mv, err := c.negotiate(ctx)
	if err != nil {
		return nil, err
	}
	c.sc.Microversion = mv
	// The quarantine trait must exist before scans filter on it.
	if err := c.ensureTrait(ctx, cfg.QuarantineTrait); err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	c.log.Info("placement connected", "endpoint", sc.Endpoint, "microversion", mv)
	return c, nil
}

// Calls returns how many HTTP requests this client has made to Placement
// (Keystone excluded). Scans report their own count in ScanResult.Calls.
func (c *Client) Calls() uint64 { return c.calls.Load() }

// Microversion is the one negotiated at start.
func (c *Client) Microversion() string { return c.sc.Microversion }

// Config returns the effective configuration (defaults applied).
func (c *Client) Config() Config { return c.cfg }
