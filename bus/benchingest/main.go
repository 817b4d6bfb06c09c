// Command benchingest measures scourd's ingest rate through the real broker
// against a bare amqp091-go consume-and-ack loop on the same messages, and
// prints the ratio (target >= 0.8). Run it with `make bench-ingest`; it is
// a development tool, not shipped.
//
// Both queues are bound to one exchange, so one publish puts the same N
// oslo-enveloped notifications in each. The bare loop drains its queue
// first (one channel, prefetch = workers x prefetch, ack each); then a
// scour bus in dispatch mode drains its own: decode, build the command,
// publish it broker-confirmed to scour's exchange, ack. Its per-host
// intake runs at the same time, as in production; the end-to-end rate
// (commands handled) is printed for information.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/metrics"
)

func main() {
	url := flag.String("url", envOr("SCOUR_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker")
	n := flag.Int("n", 10000, "notifications")
	workers := flag.Int("workers", 2, "scour workers (bus.workers)")
	prefetch := flag.Int("prefetch", 32, "prefetch per consumer channel (bus.prefetch)")
	ignored := flag.Float64("ignored", 0, "share of notifications of event types scour ignores (0..1)")
	classic := flag.Bool("classic", false, "classic queues instead of quorum (bus.classic_queues)")
	sample := flag.String("sample", "notification/testdata/versioned/instance-delete-end.json", "relevant sample")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the scour phase")
	flag.Parse()
	profile = *cpuprofile
	var stop context.CancelFunc
	interrupted, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(*url, *n, *workers, *prefetch, *ignored, *sample, *classic); err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(url string, n, workers, prefetch int, ignored float64, samplePath string, classic bool) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("broker %s: %w", bus.Redact(url), err)
	}
	defer conn.Close()
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	sfx := hex.EncodeToString(id)
	cfg := bus.Config{
		URL: url, Nova: bus.NovaConfig{Exchange: "nova-bench-" + sfx}, NotificationsQueue: "scour.notifications.bench-" + sfx,
		Exchange: "scour-bench-" + sfx, HostQueuePrefix: "scour.host.bench-" + sfx + ".", PoisonQueue: "scour.poison.bench-" + sfx,
		Workers: workers, Prefetch: prefetch, ClassicQueues: classic,
	}
	cfg.SetDefaults()
	bareQueue := "bare.bench-" + sfx
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer cleanup(conn, cfg, bareQueue)
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if classic {
		quorum = nil
	}
	if err := ch.ExchangeDeclare(cfg.Nova.Exchange, "topic", false, false, false, false, nil); err != nil {
		return err
	}
	for _, q := range []string{bareQueue, cfg.NotificationsQueue} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, quorum); err != nil {
			return err
		}
		if err := ch.QueueBind(q, "versioned_notifications.info", cfg.Nova.Exchange, false, nil); err != nil {
			return err
		}
	}
	relevant, err := publish(ch, cfg.Nova.Exchange, n, ignored, samplePath)
	if err != nil {
		return err
	}
	bareRate, err := bare(conn, bareQueue, n, workers*prefetch)
	if err != nil {
		return err
	}
	scourRate, e2eRate, err := scour(conn, cfg, n, relevant)
	if err != nil {
		return err
	}
	fmt.Printf("bench-ingest: %d notifications (%.0f%% ignored types), workers=%d prefetch=%d\n", n, ignored*100, workers, prefetch)
	fmt.Printf("  bare amqp091-go consume+ack:          %8.0f notifications/s\n", bareRate)
	fmt.Printf("  scour dispatch (decode+confirm+ack):  %8.0f notifications/s\n", scourRate)
	fmt.Printf("  scour end-to-end (commands handled):  %8.0f notifications/s\n", e2eRate)
	verdict := "OK"
	if scourRate/bareRate < 0.8 {
		verdict = "BELOW TARGET"
	}
	fmt.Printf("  ratio scour/bare: %.2f (target >= 0.80) %s\n", scourRate/bareRate, verdict)
	return nil
}

// publish sends n notifications, the share ignored of them of an event
// type scour ignores, and returns how many are relevant.
func publish(ch *amqp.Channel, exchange string, n int, ignored float64, samplePath string) (int, error) {
	raw, err := os.ReadFile(samplePath)
	if err != nil {
		return 0, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	ctx := context.Background()
	relevant := 0
	for i := range n {
		m["message_id"] = fmt.Sprintf("bench-%d", i)
		m["event_type"] = "instance.delete.end"
		if float64(i%100) < ignored*100 {
			m["event_type"] = "instance.update"
		} else {
			relevant++
		}
		m["timestamp"] = "2026-11-22 02:59:51.390927"
		inner, _ := json.Marshal(m)
		if err := bus.PublishOslo(ctx, ch, exchange, "versioned_notifications.info", inner); err != nil {
			return 0, err
		}
	}
	return relevant, nil
}

// bare drains queue with one consumer, acking each delivery.
func bare(conn *amqp.Connection, queue string, n, prefetch int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	start := time.Now()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		d, ok := <-deliveries
		if !ok {
			return 0, fmt.Errorf("bare consumer closed after %d", i)
		}
		if err := d.Ack(false); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

var (
	profile     string
	interrupted context.Context // cancelled on SIGINT/SIGTERM: clean up and stop
)

// scour runs a bus over its (full) queue. Timing starts when the queue
// starts draining (connection and topology set-up excluded, as for the
// bare loop) and the dispatch phase ends when no ready message is left
// (at most workers x prefetch unacked ones remain: under 1% of n).
func scour(conn *amqp.Connection, cfg bus.Config, n, relevant int) (dispatchRate, e2eRate float64, err error) {
	var handled atomic.Int64
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.New(cfg, "compute", bus.HandlerFunc(func(context.Context, *command.Command) error {
		handled.Add(1)
		return nil
	}), metrics.New(), log)
	if err != nil {
		return 0, 0, err
	}
	probe, err := conn.Channel()
	if err != nil {
		return 0, 0, err
	}
	defer probe.Close()
	ready := func() (int, error) {
		q, err := probe.QueueDeclarePassive(cfg.NotificationsQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		return q.Messages, err
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return 0, 0, err
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var start time.Time
	var dispatched time.Duration
	deadline := time.Now().Add(10 * time.Minute)
	for handled.Load() < int64(relevant) || dispatched == 0 {
		if dispatched == 0 {
			r, err := ready()
			if err != nil {
				return 0, 0, err
			}
			if start.IsZero() && r < n {
				start = time.Now()
			}
			if r == 0 {
				dispatched = time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("scour handled %d of %d in 10 minutes", handled.Load(), relevant)
		}
		select {
		case <-interrupted.Done():
			return 0, 0, errors.New("interrupted")
		case err := <-done:
			return 0, 0, fmt.Errorf("bus stopped: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	e2e := time.Since(start)
	return float64(n) / dispatched.Seconds(), float64(n) / e2e.Seconds(), nil
}

func cleanup(conn *amqp.Connection, cfg bus.Config, bareQueue string) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{bareQueue, cfg.NotificationsQueue, cfg.HostQueue("compute"), cfg.PoisonQueue} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(cfg.Nova.Exchange, false, false)
	_ = ch.ExchangeDelete(cfg.Exchange, false, false)
}
