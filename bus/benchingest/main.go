// Command benchingest measures scourd's ingest rate through the real broker
// against a bare amqp091-go consume-and-ack loop on the same messages, and
// prints the ratio (target >= 0.8). Run it with `make bench-ingest`; it is
// a development tool, not shipped.
//
// For each mix of notifications (relevant: every one makes scour publish a
// command; ignored: event types scour acks without action; or a share of
// ignored ones) it runs a warm-up round, then -rounds measured rounds. A
// round purges both queues, publishes the same n oslo-enveloped
// notifications once to an exchange both queues are bound to, and drains
// each queue in turn (the order alternates between rounds, so drift in the
// machine's load does not favour one side):
//
//   - bare: -workers channels, each with prefetch -prefetch, each acking
//     every delivery as it arrives;
//   - scour: a bus in dispatch mode with the same workers and prefetch:
//     decode, build the command, publish it broker-confirmed to scour's
//     exchange (commands waiting at the same time share a message), ack.
//     Its per-host intake consumes the commands at the same time, as in
//     production. With -mode direct, the bus handles each command
//     in-process instead (bus.mode: direct, no hop).
//
// Both clocks start once the consumers are subscribed and stop when the
// last of the n notifications has been acked (scour: Bus.Stats, so
// nothing polls the broker while it runs). The end-to-end rate (all
// commands handled by the intake) is printed for information. Each round
// also records the CPU time the broker (the process listening on the
// URL's port, when it is local) and this process spent, per notification.
// The verdict uses the median ratio; the spread (min..max) is printed
// because the broker shares the machine with everything else (and, on a
// virtual machine, with the host's other guests: check steal time).
//
// Both loops run in this process under scourd's garbage-collector
// defaults (internal/gctune: GOGC=400, GOMEMLIMIT=192MiB unless the
// environment sets them), as scourd would.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/gctune"
	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/notification"
)

const target = 0.8

type options struct {
	url               string
	n, rounds         int
	workers, prefetch int
	classic           bool
	mode              string
	sample            string
	cpuprofile        string
}

func main() {
	var o options
	var scourd bus.Config // both loops run with scourd's defaults unless told otherwise
	scourd.SetDefaults()
	flag.StringVar(&o.url, "url", envOr("SCOUR_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker")
	flag.IntVar(&o.n, "n", 10000, "notifications per round")
	flag.IntVar(&o.rounds, "rounds", 3, "measured rounds per mix (after one warm-up round)")
	flag.IntVar(&o.workers, "workers", scourd.Workers, "consumer channels per queue, both loops (bus.workers; default: scourd's)")
	flag.IntVar(&o.prefetch, "prefetch", scourd.Prefetch, "prefetch per consumer channel, both loops (bus.prefetch; default: scourd's)")
	mixes := flag.String("mixes", "relevant,mixed,ignored", "comma-separated mixes: relevant, ignored, mixed (90% ignored) or a share of ignored notifications (0..1)")
	ignored := flag.Float64("ignored", -1, "measure only this share of ignored notifications (0..1; shorthand for -mixes)")
	flag.BoolVar(&o.classic, "classic", false, "classic queues instead of quorum (bus.classic_queues)")
	flag.StringVar(&o.mode, "mode", bus.ModeDispatch, "scour's bus.mode: dispatch (commands through scour's exchange and the host queue) or direct (handled in-process, no hop)")
	flag.StringVar(&o.sample, "sample", "notification/testdata/versioned/instance-delete-end.json", "relevant sample")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of scour's measured drains only (one file per mix and round: PATH.<mix>.<round>)")
	flag.Parse()
	shares, err := parseMixes(*mixes, *ignored)
	if err == nil && o.mode != bus.ModeDispatch && o.mode != bus.ModeDirect {
		err = fmt.Errorf("-mode %q is not dispatch or direct", o.mode)
	}
	if err == nil && (o.n < 1 || o.rounds < 1 || o.workers < 1 || o.prefetch < 1) {
		err = errors.New("-n, -rounds, -workers and -prefetch must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(2)
	}
	var stop context.CancelFunc
	interrupted, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(o, shares); err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(1)
	}
}

var interrupted context.Context // cancelled on SIGINT/SIGTERM: clean up and stop

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func parseMixes(s string, ignored float64) ([]float64, error) {
	if ignored >= 0 {
		if ignored > 1 {
			return nil, fmt.Errorf("-ignored %v is outside 0..1", ignored)
		}
		return []float64{ignored}, nil
	}
	var out []float64
	for _, m := range strings.Split(s, ",") {
		switch m = strings.TrimSpace(m); m {
		case "relevant":
			out = append(out, 0)
		case "ignored":
			out = append(out, 1)
		case "mixed":
			out = append(out, 0.9)
		default:
			f, err := strconv.ParseFloat(m, 64)
			if err != nil || f < 0 || f > 1 {
				return nil, fmt.Errorf("-mixes: %q is not relevant, ignored, mixed or a share 0..1", m)
			}
			out = append(out, f)
		}
	}
	return out, nil
}

func mixName(share float64) string {
	switch share {
	case 0:
		return "relevant (every notification makes a command)"
	case 1:
		return "ignored (event types scour acks without action)"
	}
	return fmt.Sprintf("%.0f%% ignored", share*100)
}

// sample is one round's measurement of one loop.
type sample struct {
	n                       int     // notifications timed
	rate, e2e               float64 // notifications/s
	hasE2E                  bool
	brokerPerMsg, selfPerMs float64 // CPU µs per notification
	perMessage              float64 // commands per message on scour's exchange (mean)
}

type bench struct {
	o         options
	conn      *amqp.Connection
	cfg       bus.Config
	bareQueue string
	broker    int    // pid of the local broker, 0 when unknown
	notif     []byte // the relevant notification (inner oslo message)
	profile   string // where the next scour drain writes its CPU profile ("": none)
}

func run(o options, shares []float64) error {
	notif, err := os.ReadFile(o.sample)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or set -sample)", err)
	}
	conn, err := amqp.Dial(o.url)
	if err != nil {
		return fmt.Errorf("broker %s: %w", bus.Redact(o.url), err)
	}
	defer conn.Close()
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	sfx := hex.EncodeToString(id)
	cfg := bus.Config{
		URL: o.url, Nova: bus.NovaConfig{Exchange: "nova-bench-" + sfx}, NotificationsQueue: "scour.notifications.bench-" + sfx,
		Exchange: "scour-bench-" + sfx, HostQueuePrefix: "scour.host.bench-" + sfx + ".", PoisonQueue: "scour.poison.bench-" + sfx,
		Workers: o.workers, Prefetch: o.prefetch, ClassicQueues: o.classic, Mode: o.mode,
	}
	cfg.SetDefaults()
	b := &bench{o: o, conn: conn, cfg: cfg, bareQueue: "bare.bench-" + sfx, broker: brokerPID(o.url), notif: notif}
	defer b.cleanup()
	if err := b.declare(); err != nil {
		return err
	}
	queues := "quorum"
	if o.classic {
		queues = "classic"
	}
	fmt.Printf("bench-ingest: %d notifications per round, %d rounds per mix after a warm-up round, workers=%d prefetch=%d %s (both loops), %s queues, scour in %s mode\n",
		o.n, o.rounds, o.workers, o.prefetch, gctune.Apply(os.Getenv), queues, o.mode)
	fmt.Printf("  load average at start: %s\n", loadavg())
	if b.broker == 0 {
		fmt.Println("  (broker CPU not measured: no local process found listening on the broker's port)")
	}
	type verdict struct {
		share float64
		ratio float64
	}
	var verdicts []verdict
	for _, share := range shares {
		fmt.Printf("\nmix: %s\n", mixName(share))
		if _, _, err := b.round(share, max(o.n/5, 200), false); err != nil { // warm-up, not counted
			return fmt.Errorf("warm-up: %w", err)
		}
		var bares, scours []sample
		var ratios []float64
		for r := range o.rounds {
			b.profile = ""
			if o.cpuprofile != "" {
				b.profile = fmt.Sprintf("%s.%g.%d", o.cpuprofile, share, r+1)
			}
			bs, ss, err := b.round(share, o.n, r%2 == 1)
			if err != nil {
				return fmt.Errorf("round %d: %w", r+1, err)
			}
			bares, scours = append(bares, bs), append(scours, ss)
			ratios = append(ratios, ss.rate/bs.rate)
			e2e := ""
			if ss.hasE2E {
				e2e = fmt.Sprintf("  (end-to-end, commands handled: %.0f/s)", ss.e2e)
			}
			fmt.Printf("  round %d: bare %8.0f/s  scour %8.0f/s  ratio %.2f%s\n", r+1, bs.rate, ss.rate, ss.rate/bs.rate, e2e)
		}
		rate := func(s sample) float64 { return s.rate }
		fmt.Printf("  bare amqp091-go consume+ack:          median %8.0f notifications/s (%s)\n", median(bares, rate), spread(bares, rate))
		label := "scour dispatch (decode+confirm+ack):"
		if o.mode == bus.ModeDirect {
			label = "scour direct (decode+handle+ack):   "
		}
		fmt.Printf("  %s  median %8.0f notifications/s (%s)\n", label, median(scours, rate), spread(scours, rate))
		if scours[0].hasE2E {
			e2e := func(s sample) float64 { return s.e2e }
			fmt.Printf("  scour end-to-end (commands handled):  median %8.0f notifications/s (%s)\n", median(scours, e2e), spread(scours, e2e))
			if o.mode == bus.ModeDispatch {
				pm := func(s sample) float64 { return s.perMessage }
				fmt.Printf("  commands per message on scour's exchange: median %.1f (%s)\n", median(scours, pm), spreadF(scours, pm, "%.1f"))
			}
		}
		self := func(s sample) float64 { return s.selfPerMs }
		cpu := fmt.Sprintf("  CPU per notification (median): this process bare %.0fµs, scour %.0fµs", median(bares, self), median(scours, self))
		if b.broker != 0 {
			brk := func(s sample) float64 { return s.brokerPerMsg }
			cpu += fmt.Sprintf("; broker bare %.0fµs, scour %.0fµs", median(bares, brk), median(scours, brk))
		}
		fmt.Println(cpu)
		r := medianF(ratios)
		fmt.Printf("  ratio scour/bare: median %.2f (%.2f..%.2f over %d rounds), target >= %.2f: %s\n",
			r, slices.Min(ratios), slices.Max(ratios), len(ratios), target, pass(r))
		verdicts = append(verdicts, verdict{share, r})
	}
	fmt.Printf("\nsummary (load average at end: %s):\n", loadavg())
	for _, v := range verdicts {
		fmt.Printf("  %-50s ratio %.2f  %s\n", mixName(v.share), v.ratio, pass(v.ratio))
	}
	return nil
}

func pass(r float64) string {
	if r >= target {
		return "PASS"
	}
	return "BELOW TARGET"
}

func median(s []sample, f func(sample) float64) float64 {
	var v []float64
	for _, x := range s {
		v = append(v, f(x))
	}
	return medianF(v)
}

func medianF(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func spread(s []sample, f func(sample) float64) string { return spreadF(s, f, "%.0f") }

func spreadF(s []sample, f func(sample) float64, verb string) string {
	var v []float64
	for _, x := range s {
		v = append(v, f(x))
	}
	return fmt.Sprintf(verb+".."+verb, slices.Min(v), slices.Max(v))
}

// commandsPerMessage is the mean of scour_commands_batch_size (0 when
// nothing was published).
func commandsPerMessage(m *metrics.Metrics) float64 {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "scour_commands_batch_size" && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() > 0 {
				return h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	return 0
}

// declare sets up Nova's (benchmark) exchange and the bare queue, with
// the arguments scour gives its own quorum queues (delivery limit,
// dead-lettering) so both loops drain the same kind of queue, then runs a
// bus once until it is consuming so that scour declares its own queues
// exactly as in production.
func (b *bench) declare() error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	args := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		"x-delivery-limit": int64(b.cfg.DeliveryLimit), "x-dead-letter-exchange": b.cfg.UnroutableExchange()}
	if b.o.classic {
		args = nil
	}
	if err := ch.ExchangeDeclare(b.cfg.Nova.Exchange, "topic", false, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(b.bareQueue, true, false, false, false, args); err != nil {
		return err
	}
	if err := ch.QueueBind(b.bareQueue, "versioned_notifications.info", b.cfg.Nova.Exchange, false, nil); err != nil {
		return err
	}
	bs, err := bus.New(b.cfg, "compute", &bus.Recorder{}, metrics.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bs.Run(ctx) }()
	defer cancel()
	for deadline := time.Now().Add(time.Minute); bs.Ready() != nil; {
		select {
		case err := <-done:
			return fmt.Errorf("declaring scour's topology: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scour's bus not consuming after a minute: %v", bs.Ready())
		}
	}
	cancel()
	return <-done
}

// round purges both queues, publishes n notifications to both, and drains
// them with each loop in turn (scour first when scourFirst).
func (b *bench) round(share float64, n int, scourFirst bool) (bare, scour sample, err error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return bare, scour, err
	}
	defer ch.Close()
	for _, q := range []string{b.bareQueue, b.cfg.NotificationsQueue, b.cfg.HostQueue("compute")} {
		if _, err := ch.QueuePurge(q, false); err != nil && !isNotFound(err) {
			return bare, scour, fmt.Errorf("purging %s: %w", q, err)
		}
		if ch.IsClosed() { // a purge of a queue not declared yet closes the channel
			if ch, err = b.conn.Channel(); err != nil {
				return bare, scour, err
			}
			defer ch.Close()
		}
	}
	relevant, err := b.publish(ch, n, share)
	if err != nil {
		return bare, scour, err
	}
	runBare := func() error { bare, err = b.bare(n); return err }
	runScour := func() error {
		if b.profile != "" {
			f, err := os.Create(b.profile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		scour, err = b.scour(n, relevant)
		return err
	}
	steps := []func() error{runBare, runScour}
	if scourFirst {
		steps = []func() error{runScour, runBare}
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return bare, scour, err
		}
	}
	return bare, scour, nil
}

func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

// publish sends n notifications (the share ignored of them of an event
// type scour ignores) with confirms pipelined, and returns how many are
// relevant.
func (b *bench) publish(ch *amqp.Channel, n int, ignored float64) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(b.notif, &m); err != nil {
		return 0, fmt.Errorf("%s: %w", b.o.sample, err)
	}
	// encode each event type once, with a placeholder message id that
	// each publish replaces (same length, so the envelope stays valid)
	const placeholder = "bench-message-id-0000000000000000000000"
	m["message_id"] = placeholder
	m["timestamp"] = "2026-11-22 02:59:51.390927"
	bodies := map[string][]byte{}
	for _, et := range []string{"instance.delete.end", "instance.update"} {
		m["event_type"] = et
		inner, err := json.Marshal(m)
		if err != nil {
			return 0, err
		}
		if bodies[et], err = notification.EncodeOslo(inner); err != nil {
			return 0, err
		}
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	ctx := context.Background()
	var pending []*amqp.DeferredConfirmation
	wait := func() error {
		for _, dc := range pending {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("publishing the notifications: confirm %v %v", ok, err)
			}
		}
		pending = pending[:0]
		return nil
	}
	relevant := 0
	runID := time.Now().UnixNano()
	for i := range n {
		et := "instance.delete.end"
		if float64(i%100) < ignored*100 {
			et = "instance.update"
		} else {
			relevant++
		}
		id := fmt.Sprintf("bench-%019d-%013d", runID, i)
		body := []byte(strings.Replace(string(bodies[et]), placeholder, id[:len(placeholder)], 1))
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, b.cfg.Nova.Exchange, "versioned_notifications.info", false, false, amqp.Publishing{
			ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent, Body: body,
		})
		if err != nil {
			return 0, err
		}
		if pending = append(pending, dc); len(pending) == 500 {
			if err := wait(); err != nil {
				return 0, err
			}
		}
	}
	return relevant, wait()
}

// bare drains the bare queue with -workers consumers, each on its own
// channel with the same prefetch as scour's, acking each delivery.
func (b *bench) bare(n int) (sample, error) {
	var chans []*amqp.Channel
	defer func() {
		for _, ch := range chans {
			_ = ch.Close()
		}
	}()
	for range b.o.workers {
		ch, err := b.conn.Channel()
		if err != nil {
			return sample{}, err
		}
		chans = append(chans, ch)
		if err := ch.Qos(b.o.prefetch, 0, false); err != nil {
			return sample{}, err
		}
	}
	m := b.startMeasure(0) // the clock includes subscribing: nothing is delivered before it
	var deliveries []<-chan amqp.Delivery
	for _, ch := range chans {
		d, err := ch.Consume(b.bareQueue, "", false, false, false, false, nil)
		if err != nil {
			return sample{}, err
		}
		deliveries = append(deliveries, d)
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(deliveries))
	done := make(chan struct{})
	for _, d := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case del, ok := <-d:
					if !ok {
						errs <- errors.New("bare consumer closed")
						return
					}
					if err := del.Ack(false); err != nil {
						errs <- err
						return
					}
					if acked.Add(1) == int64(n) {
						close(done)
					}
				case <-done:
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case err := <-errs:
		return sample{}, err
	case <-interrupted.Done():
		return sample{}, errors.New("interrupted")
	case <-time.After(10 * time.Minute):
		return sample{}, fmt.Errorf("bare acked %d of %d in 10 minutes", acked.Load(), n)
	}
	s := m.stop(n)
	for _, ch := range chans { // stop the consumers before waiting for them
		_ = ch.Close()
	}
	wg.Wait()
	return s, nil
}

// scour drains the notifications queue with a bus.
func (b *bench) scour(n, relevant int) (sample, error) {
	var handled atomic.Int64
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mt := metrics.New()
	bs, err := bus.New(b.cfg, "compute", bus.HandlerFunc(func(context.Context, *command.Command) error {
		handled.Add(1)
		return nil
	}), mt, log)
	if err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bs.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var m *measure
	var s sample
	for {
		switch {
		case m == nil && bs.Ready() == nil:
			// the first consumers may have settled a few notifications
			// while the others subscribed: they are not timed
			m = b.startMeasure(int(bs.Stats().Notifications))
		case m != nil && s.n == 0 && bs.Stats().Notifications >= uint64(n):
			s = m.stop(n)
		}
		if s.n != 0 && handled.Load() >= int64(relevant) {
			if relevant > 0 {
				s.hasE2E = true
				s.e2e = float64(s.n) / time.Since(m.start).Seconds()
				s.perMessage = commandsPerMessage(mt)
			}
			return s, nil
		}
		if time.Now().After(deadline) {
			return sample{}, fmt.Errorf("scour settled %d of %d notifications, handled %d of %d commands in 10 minutes",
				bs.Stats().Notifications, n, handled.Load(), relevant)
		}
		select {
		case <-interrupted.Done():
			return sample{}, errors.New("interrupted")
		case err := <-done:
			done <- err // for the deferred wait
			return sample{}, fmt.Errorf("bus stopped: %v", err)
		case <-tick.C:
		}
	}
}

// measure records wall and CPU time from start to stop.
type measure struct {
	b            *bench
	pre          int // notifications settled before the start
	start        time.Time
	self, broker time.Duration
	brokerOK     bool
}

func (b *bench) startMeasure(pre int) *measure {
	m := &measure{b: b, pre: pre, self: selfCPU()}
	m.broker, m.brokerOK = procCPU(b.broker)
	m.start = time.Now()
	return m
}

// stop ends the measure of n notifications (less those settled before
// the start).
func (m *measure) stop(n int) sample {
	elapsed := time.Since(m.start)
	s := sample{n: n - m.pre}
	s.rate = float64(s.n) / elapsed.Seconds()
	s.selfPerMs = float64((selfCPU() - m.self).Microseconds()) / float64(s.n)
	if bc, ok := procCPU(m.b.broker); ok && m.brokerOK {
		s.brokerPerMsg = float64((bc - m.broker).Microseconds()) / float64(s.n)
	}
	return s
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user+system CPU time of pid from /proc (Linux, 100 Hz).
func procCPU(pid int) (time.Duration, bool) {
	if pid == 0 {
		return 0, false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// brokerPID finds the local process listening on the broker URL's port
// (Linux /proc; 0 when it is remote, in another namespace or unreadable).
func brokerPID(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5672
	}
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" { // LISTEN
				continue
			}
			if j := strings.LastIndexByte(fl[1], ':'); j >= 0 {
				if p, err := strconv.ParseInt(fl[1][j+1:], 16, 32); err == nil && int(p) == port {
					inodes = append(inodes, "socket:["+fl[9]+"]")
				}
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && slices.Contains(inodes, l) {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func (b *bench) cleanup() {
	ch, err := b.conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{b.bareQueue, b.cfg.NotificationsQueue, b.cfg.HostQueue("compute"), b.cfg.PoisonQueue} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(b.cfg.Nova.Exchange, false, false)
	_ = ch.ExchangeDelete(b.cfg.Exchange, false, false)
}
