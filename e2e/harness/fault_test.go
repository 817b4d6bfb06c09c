package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	amqp "github.com/rabbitmq/amqp091-go"
)

// reconnectingConsumer is a plain amqp091-go consumer that redials after
// the broker goes away, acking each message after recording it. It stands
// in for scour's bus consumer, which the lead will point at the same test.
//
// With a gate it holds the delivery after holdAt distinct messages, unacked,
// until the gate is closed: the test decides when the consumer may go on,
// so a backlog is certain to be queued when the broker goes away (a fixed
// pace per message was not: on a loaded CI machine the consumer once
// drained the whole backlog before the stop took effect).
type reconnectingConsumer struct {
	url, queue string
	holdAt     int
	gate       <-chan struct{}
	mu         sync.Mutex
	seen       map[string]int
	reconnects int
}

func (c *reconnectingConsumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.session(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func (c *reconnectingConsumer) session(ctx context.Context) error {
	conn, err := amqp.DialConfig(c.url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	c.mu.Lock()
	c.reconnects++
	c.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(c.queue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Qos(1, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(c.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-deliveries:
			if !ok {
				return errors.New("deliveries closed")
			}
			if c.gate != nil {
				if n, _ := c.count(); n >= c.holdAt {
					select {
					case <-c.gate:
					case <-ctx.Done():
						return nil
					}
				}
			}
			c.mu.Lock()
			c.seen[string(m.Body)]++
			c.mu.Unlock()
			_ = m.Ack(false)
		}
	}
}

func (c *reconnectingConsumer) count() (distinct, sessions int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.reconnects
}

func publishPersistent(t *testing.T, url, queue string, ids []string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", queue, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish %s not confirmed: %v", id, err)
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestBrokerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	b := StartRabbitMQ(t, Dedicated())
	queue := UniqueName("restart")
	gate := make(chan struct{})
	c := &reconnectingConsumer{url: b.URL(), queue: queue, holdAt: 5, gate: gate, seen: map[string]int{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	before, after := ids("before", 60), ids("after", 20)
	publishPersistent(t, b.URL(), queue, before)
	waitFor(t, "the consumer to start on the backlog", 30*time.Second, func() bool { n, _ := c.count(); return n >= c.holdAt })

	// The consumer now holds its sixth message unacked: the stop finds
	// it in flight and 55 queued behind it.
	b.Stop(t)
	if n, _ := c.count(); n >= len(before) {
		t.Fatalf("consumer drained all %d messages before the stop: the test proves nothing", n)
	}
	close(gate)
	b.Start(t)
	publishPersistent(t, b.URL(), queue, after)

	waitFor(t, "every message before and after the restart", 60*time.Second, func() bool {
		n, _ := c.count()
		return n == len(before)+len(after)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range append(before, after...) {
		if c.seen[id] == 0 {
			t.Errorf("message %s lost", id)
		}
	}
	if c.reconnects < 2 {
		t.Errorf("consumer connected %d times, want a reconnect after the restart", c.reconnects)
	}
}

func TestCloseConnectionsForcesClientsOff(t *testing.T) {
	t.Parallel()
	b := StartRabbitMQ(t).VHost(t)
	conn := b.Dial(t)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	b.CloseConnections(t)
	select {
	case err := <-closed:
		if err == nil || err.Code != amqp.ConnectionForced {
			t.Fatalf("close reason = %v, want 320 CONNECTION_FORCED", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("connection not closed within 30s")
	}
}

func TestPlacementStopStartKeepsData(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t, Dedicated())
	node := p.SeedComputeNode(t, UniqueName("cn"), Device{Address: "0000:af:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true})
	get := func() (int, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/resource_providers/"+node.UUID, nil)
		req.Header.Set("X-Auth-Token", p.Token())
		resp, err := p.HTTPClient().Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	p.Stop(t)
	if code, err := get(); err == nil && code < 500 {
		t.Fatalf("stopped Placement answered %d", code)
	}
	p.Start(t)
	if code, err := get(); err != nil || code != http.StatusOK {
		t.Fatalf("after Start: %d, %v", code, err)
	}
	if got := p.Traits(t, node.Devices[0].UUID); strings.Join(got, ",") != "COMPUTE_MANAGED_PCI_DEVICE,HW_PCI_ONE_TIME_USE" {
		t.Errorf("traits after restart = %v", got)
	}
}

func TestPlacementFaultInjection(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	node := p.SeedComputeNode(t, UniqueName("cn"))
	get := func(sc *gophercloud.ServiceClient) error {
		_, err := resourceproviders.Get(t.Context(), sc, node.UUID).Extract()
		return err
	}
	sc := p.ServiceClient()

	t.Run("500 until healed", func(t *testing.T) {
		p.Fail(http.StatusInternalServerError)
		for range 3 {
			if err := get(sc); !gophercloud.ResponseCodeIs(err, http.StatusInternalServerError) {
				t.Fatalf("want 500, got %v", err)
			}
		}
		p.Heal()
		if err := get(sc); err != nil {
			t.Fatalf("after Heal: %v", err)
		}
	})

	t.Run("limited number of failures", func(t *testing.T) {
		p.Inject(Fault{Status: http.StatusServiceUnavailable, Times: 2})
		for i := range 2 {
			if err := get(sc); !gophercloud.ResponseCodeIs(err, http.StatusServiceUnavailable) {
				t.Fatalf("request %d: want 503, got %v", i, err)
			}
		}
		if err := get(sc); err != nil {
			t.Fatalf("third request: %v", err)
		}
	})

	t.Run("hang until the client gives up", func(t *testing.T) {
		p.Hang(time.Minute)
		defer p.Heal()
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := resourceproviders.Get(ctx, sc, node.UUID).Extract()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want the client's deadline, got %v", err)
		}
	})

	t.Run("delay then forward", func(t *testing.T) {
		p.Inject(Fault{Delay: 300 * time.Millisecond, Times: 1})
		t0 := time.Now()
		if err := get(sc); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(t0); waited < 300*time.Millisecond {
			t.Fatalf("answered after %s, before the injected delay", waited)
		}
	})

	t.Run("a write lands, its answer is lost", func(t *testing.T) {
		p.Inject(Fault{Method: http.MethodPut, LoseAnswer: true, Status: http.StatusBadGateway, Times: 1})
		defer p.Heal()
		if err := get(sc); err != nil {
			t.Fatalf("a GET under a PUT-only fault: %v", err)
		}
		p.call(t, http.MethodPut, "/traits/CUSTOM_LOST_ANSWER", Microversion, nil, nil, http.StatusCreated, http.StatusNoContent)
		_, gen := p.Inventories(t, node.UUID)
		_, err := resourceproviders.UpdateTraits(t.Context(), sc, node.UUID, resourceproviders.UpdateTraitsOpts{
			ResourceProviderGeneration: gen, Traits: []string{"CUSTOM_LOST_ANSWER"},
		}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusBadGateway) {
			t.Fatalf("the PUT's answer: %v, want the injected 502", err)
		}
		if traits := p.Traits(t, node.UUID); len(traits) != 1 || traits[0] != "CUSTOM_LOST_ANSWER" {
			t.Fatalf("traits after the PUT whose answer was lost = %v; want it landed", traits)
		}
	})

	t.Run("faults only reach the proxy", func(t *testing.T) {
		p.Fail(http.StatusInternalServerError)
		defer p.Heal()
		// The harness's own helpers talk to the backend directly.
		inv, _ := p.Inventories(t, node.UUID)
		if len(inv) != 3 {
			t.Fatalf("inventories through the backend = %v", inv)
		}
		total, faulted := p.Requests()
		if faulted == 0 || faulted > total {
			t.Fatalf("request counters total=%d faulted=%d", total, faulted)
		}
	})
}

func TestMissingEngineTellsWhatToRun(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/podman.sock")
	err := engineEnv()
	if err == nil || !strings.Contains(err.Error(), "make e2e-env") {
		t.Fatalf("engineEnv() = %v, want an error telling to run make e2e-env", err)
	}
}
