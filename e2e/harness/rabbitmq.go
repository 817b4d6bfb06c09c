package harness

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Broker is a RabbitMQ the test may use: the package's shared container, a
// dedicated one, or the broker at SCOUR_E2E_AMQP_URL.
type Broker struct {
	svc   *service // nil for an external broker
	base  string   // amqp URL of the default vhost
	vhost string
}

func newRabbitMQ() (*service, error) {
	rabbit, _, err := imageNames()
	if err != nil {
		return nil, err
	}
	s := &service{kind: "rabbitmq", image: rabbit, port: "5672/tcp"}
	s.ready = func(ctx context.Context, hostPort int) error {
		return rabbitReady(ctx, s, fmt.Sprintf("localhost:%d", hostPort))
	}
	return s, nil
}

// rabbitReady reports whether the broker in s, reached at addr, takes
// AMQP logins and has finished booting. The AMQP listener opens before the
// rabbit application's start returns; in that window rabbitmqctl commands
// that need the application (add_vhost, set_permissions) fail with "this
// command requires the 'rabbit' app to be running" (seen once in CI), so
// a login alone is not ready: await_startup waits out the rest of the boot.
func rabbitReady(ctx context.Context, s *service, addr string) error {
	if err := amqpReady(ctx, addr); err != nil {
		return err
	}
	_, err := s.exec(ctx, "rabbitmq", "rabbitmqctl", "await_startup", "--timeout", "60")
	return err
}

// amqpReady reports whether the broker at addr (host:port) accepts guest's
// AMQP login.
func amqpReady(_ context.Context, addr string) error {
	conn, err := amqp.DialConfig("amqp://guest:guest@"+addr+"/",
		amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// StartRabbitMQ returns the package's shared broker (started on first use;
// needs harness.Main), a dedicated one with Dedicated(), or the broker at
// SCOUR_E2E_AMQP_URL. Use VHost for a private namespace per test.
func StartRabbitMQ(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	skipShort(t)
	o := collect(opts)
	if u := os.Getenv(EnvAMQPURL); u != "" {
		if o.dedicated {
			t.Skipf("e2e harness: a dedicated broker needs container mode; %s points at an external broker", EnvAMQPURL)
		}
		return &Broker{base: u, vhost: "/"}
	}
	svc := acquire(t, newRabbitMQ, "rabbitmq", o.dedicated)
	return &Broker{svc: svc, base: fmt.Sprintf("amqp://guest:guest@localhost:%d/", svc.hostPort), vhost: "/"}
}

// URL is the AMQP URL of this broker's vhost.
func (b *Broker) URL() string {
	if b.vhost == "/" {
		return b.base
	}
	return strings.TrimSuffix(b.base, "/") + "/" + url.PathEscape(b.vhost)
}

// Name of the broker's vhost.
func (b *Broker) VHostName() string { return b.vhost }

// VHost creates a fresh vhost (guest has all rights) removed when the test
// ends, and returns a Broker scoped to it: a test's nova exchange, queues
// and notifications stay its own. Against an external broker it returns b
// unchanged (the test shares the broker's vhost) and logs so.
func (b *Broker) VHost(t testing.TB) *Broker {
	t.Helper()
	if b.svc == nil {
		t.Logf("e2e harness: %s is set: using its vhost as is, tests are not isolated by vhost", EnvAMQPURL)
		return b
	}
	name := UniqueName("vh")
	b.ctl(t, "add_vhost", name)
	b.ctl(t, "set_permissions", "-p", name, "guest", ".*", ".*", ".*")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = b.svc.exec(ctx, "rabbitmq", "rabbitmqctl", "delete_vhost", name)
	})
	return &Broker{svc: b.svc, base: b.base, vhost: name}
}

// Rabbitmqctl runs rabbitmqctl in the broker's container and returns its
// output (container brokers only).
func (b *Broker) Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	b.needContainer(t, "rabbitmqctl")
	return b.ctl(t, args...)
}

func (b *Broker) ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := b.svc.exec(t.Context(), "rabbitmq", append([]string{"rabbitmqctl"}, args...)...)
	if err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	return out
}

// CloseConnections makes the broker close every client connection to this
// Broker's vhost (320 CONNECTION_FORCED), as an operator's `rabbitmqctl
// close_all_connections` or a failover does. On the shared broker's default
// vhost that includes other tests' connections: use a VHost.
func (b *Broker) CloseConnections(t testing.TB) {
	t.Helper()
	b.needContainer(t, "CloseConnections")
	b.ctl(t, "close_all_connections", "-p", b.vhost, "closed by the scour e2e harness")
}

// Stop stops the broker container (clients see their connections drop and
// cannot reconnect until Start). Durable queues and persistent messages are
// kept. Needs a Dedicated() broker.
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.needDedicated(t, "Stop")
	if err := b.svc.stop(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// Kill SIGKILLs the broker container: no clean shutdown, connections are
// not closed by the broker (clients notice through heartbeats or a reset).
// Start brings it back on the same URL. Needs a Dedicated() broker or a
// Cluster node.
func (b *Broker) Kill(t testing.TB) {
	t.Helper()
	b.needDedicated(t, "Kill")
	if err := b.svc.kill(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
}

// Start starts a stopped broker on the same URL and waits until it accepts
// AMQP connections.
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	b.needDedicated(t, "Start")
	t0 := time.Now()
	if err := b.svc.start(t.Context()); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	t.Logf("e2e harness: rabbitmq back in %s", time.Since(t0).Round(time.Millisecond))
}

// Restart is Stop then Start.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Stop(t)
	b.Start(t)
}

func (b *Broker) needContainer(t testing.TB, what string) {
	t.Helper()
	if b.svc == nil {
		t.Skipf("e2e harness: %s needs the broker container; %s points at an external broker", what, EnvAMQPURL)
	}
}

func (b *Broker) needDedicated(t testing.TB, what string) {
	t.Helper()
	b.needContainer(t, what)
	if b.isShared() {
		t.Fatalf("e2e harness: %s would disturb every test sharing the broker: use harness.StartRabbitMQ(t, harness.Dedicated())", what)
	}
}

func (b *Broker) isShared() bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e := registry.shared["rabbitmq"]
	return e != nil && e.svc == b.svc
}

// Dial opens an AMQP connection to the broker's vhost, closed when the
// test ends.
func (b *Broker) Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatalf("e2e harness: dialing %s: %v", b.URL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
