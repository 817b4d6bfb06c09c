package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialer connects to the endpoints of a multi-host URL in turn. The first
// dial starts with the first host; once a connection has been made, the
// next dial (a reconnect: that connection is gone) starts with the host
// after it, so the host that just dropped is tried last. A crashed or
// frozen host can take the whole dial timeout to fail; trying it first
// would add that to every failover. amqp091-go dials a single URI, so
// failover between Nova's transport_url hosts is done here, in
// amqp.Config.Dial; TLS is done here too, because amqp091-go would verify
// every host against the first host's name.
type dialer struct {
	endpoints []Endpoint
	tls       *tls.Config // nil: plain TCP
	timeout   time.Duration

	mu        sync.Mutex
	next      int
	connected bool     // a dial succeeded since the last dial began
	last      net.Conn // the current connection's socket (tests cut it)
}

func (d *dialer) Dial(_, _ string) (net.Conn, error) {
	d.mu.Lock()
	if d.connected {
		// amqp091 dials once per connection: this is a reconnect.
		d.next, d.connected = (d.next+1)%len(d.endpoints), false
	}
	start := d.next
	d.mu.Unlock()
	var errs []error
	for i := range d.endpoints {
		n := (start + i) % len(d.endpoints)
		ep := d.endpoints[n]
		conn, err := d.dialOne(ep)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep.Addr, err))
			continue
		}
		d.mu.Lock()
		d.next, d.last, d.connected = n, conn, true
		d.mu.Unlock()
		return conn, nil
	}
	return nil, fmt.Errorf("no broker reachable: %v", errs)
}

func (d *dialer) dialOne(ep Endpoint) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", ep.Addr, d.timeout)
	if err != nil {
		return nil, err
	}
	// The AMQP handshake (and the heartbeat deadlines amqp091 sets later)
	// must not hang on a half-open socket.
	if err := conn.SetDeadline(time.Now().Add(d.timeout)); err != nil {
		conn.Close()
		return nil, err
	}
	if d.tls == nil {
		return conn, nil
	}
	cfg := d.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = ep.Host
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls: %w", err)
	}
	return tc, nil
}

// TLSConfig applies to amqps:// URLs (or rabbit://...?ssl=1).
type TLSConfig struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the server certificate
	// (default: each URL host).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables certificate verification. Never in production.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// amqpConfig builds the amqp091 configuration and the URI Conn dials (its host part is ignored by dialer; credentials and vhost count).
func amqpConfig(cfg *Options) (string, *amqp.Config, *dialer, error) {
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return "", nil, nil, err
	}
	d := &dialer{endpoints: u.Endpoints, timeout: 15 * time.Second}
	if u.TLS {
		if d.tls, err = tlsConfig(&cfg.TLS); err != nil {
			return "", nil, nil, err
		}
	}
	ep := u.Endpoints[0]
	uri := amqp.URI{Scheme: "amqp", Host: ep.Host, Port: 5672, Username: ep.User, Password: ep.Password, Vhost: u.Vhost}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.Name)
	return uri.String(), &amqp.Config{Heartbeat: cfg.Heartbeat, Locale: "en_US", Dial: d.Dial, Properties: props}, d, nil
}

func tlsConfig(c *TLSConfig) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // operator's explicit choice
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("bus.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bus.tls.ca_file %s: no PEM certificate found", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus.tls.cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
