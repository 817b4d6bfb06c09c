// Command benchingest measures scourd's ingest rate through the real
// broker: relevant notifications per second (every one makes scour publish
// a command) and the CPU time per notification of scour's process and of
// the broker. Run it with `make bench-ingest`; it is a development tool,
// not shipped. A whole cloud sends a few hundred notifications per second
// at peak and several scourds share the queue: the target, printed with
// the result, is 2,000 relevant notifications/s for one scourd with the
// broker on the same machine.
//
// It runs a warm-up round, then -rounds measured rounds. A round purges
// scour's queues, publishes n oslo-enveloped notifications and runs a bus
// in dispatch mode (decode, publish the command broker-confirmed to
// scour's exchange, ack) whose per-host intake consumes the commands at
// the same time, as in production; with -mode direct the bus handles each
// command in-process instead (bus.mode: direct, no hop).
//
// The clock starts once the consumers are subscribed and stops when the
// last notification was settled (Bus.Stats, so nothing polls the broker
// while it runs); the end-to-end rate (all commands handled) is printed
// beside it. CPU is this process's (scour's bus and nothing else once the
// notifications are published) and the broker's (the process listening on
// the URL's port, when it is local). The median and the spread over the
// rounds are printed, because the broker shares the machine with
// everything else.
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
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/metrics"
)

// target is relevant notifications per second for one scourd.
const target = 2000

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
	var scourd bus.Config // scourd's defaults unless told otherwise
	scourd.SetDefaults()
	flag.StringVar(&o.url, "url", envOr("SCOUR_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker")
	flag.IntVar(&o.n, "n", 10000, "notifications per round")
	flag.IntVar(&o.rounds, "rounds", 3, "measured rounds (after one warm-up round)")
	flag.IntVar(&o.workers, "workers", scourd.Workers, "consumer channels per queue (bus.workers)")
	flag.IntVar(&o.prefetch, "prefetch", scourd.Prefetch, "prefetch per consumer channel (bus.prefetch)")
	flag.BoolVar(&o.classic, "classic", false, "classic queues instead of quorum (bus.classic_queues)")
	flag.StringVar(&o.mode, "mode", bus.ModeDispatch, "scour's bus.mode: dispatch (commands through scour's exchange and the host queue) or direct (handled in-process, no hop)")
	flag.StringVar(&o.sample, "sample", "notification/testdata/versioned/instance-delete-end.json", "relevant sample")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each measured round (PATH.<round>)")
	flag.Parse()
	var err error
	if o.mode != bus.ModeDispatch && o.mode != bus.ModeDirect {
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
	if err := run(o); err != nil {
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

// sample is one round's measurement.
type sample struct {
	n                       int     // notifications timed
	rate, e2e               float64 // notifications/s
	brokerPerMsg, selfPerMs float64 // CPU µs per notification
}

type bench struct {
	o       options
	conn    *amqp.Connection
	cfg     bus.Config
	broker  int    // pid of the local broker, 0 when unknown
	notif   []byte // the relevant notification (inner oslo message)
	profile string // where the next round writes its CPU profile ("": none)
}

func run(o options) error {
	notif, err := os.ReadFile(o.sample)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or set -sample)", err)
	}
	conn, err := amqp.Dial(o.url)
	if err != nil {
		return fmt.Errorf("broker %s: %w", broker.Redact(o.url), err)
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
	b := &bench{o: o, conn: conn, cfg: cfg, broker: brokerPID(o.url), notif: notif}
	defer b.cleanup()
	queues := "quorum"
	if o.classic {
		queues = "classic"
	}
	fmt.Printf("bench-ingest: %d relevant notifications per round, %d rounds after a warm-up round, workers=%d prefetch=%d, %s queues, scour in %s mode, GOGC=%s GOMEMLIMIT=%s\n",
		o.n, o.rounds, o.workers, o.prefetch, queues, o.mode, envOr("GOGC", "100"), envOr("GOMEMLIMIT", "unset"))
	fmt.Printf("  load average at start: %s\n", loadavg())
	if b.broker == 0 {
		fmt.Println("  (broker CPU not measured: no local process found listening on the broker's port)")
	}
	if _, err := b.round(max(o.n/5, 200)); err != nil { // warm-up (declares scour's topology), not counted
		return fmt.Errorf("warm-up: %w", err)
	}
	var rounds []sample
	for r := range o.rounds {
		b.profile = ""
		if o.cpuprofile != "" {
			b.profile = fmt.Sprintf("%s.%d", o.cpuprofile, r+1)
		}
		s, err := b.round(o.n)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		rounds = append(rounds, s)
		fmt.Printf("  round %d: %8.0f notifications/s  (end-to-end, commands handled: %.0f/s)  CPU scour %.0fµs broker %.0fµs per notification\n",
			r+1, s.rate, s.e2e, s.selfPerMs, s.brokerPerMsg)
	}
	rate := func(s sample) float64 { return s.rate }
	e2e := func(s sample) float64 { return s.e2e }
	self := func(s sample) float64 { return s.selfPerMs }
	brk := func(s sample) float64 { return s.brokerPerMsg }
	label := "dispatch (decode+confirmed publish+ack)"
	if o.mode == bus.ModeDirect {
		label = "direct (decode+handle+ack)"
	}
	fmt.Printf("\nrelevant notifications, %s: median %.0f/s (%s), target >= %d/s: %s\n", label, median(rounds, rate), spread(rounds, rate), target, pass(median(rounds, rate)))
	fmt.Printf("end-to-end (commands handled):  median %.0f/s (%s)\n", median(rounds, e2e), spread(rounds, e2e))
	cpu := fmt.Sprintf("CPU per notification (median): scour %.0fµs (%s)", median(rounds, self), spread(rounds, self))
	if b.broker != 0 {
		cpu += fmt.Sprintf(", broker %.0fµs (%s)", median(rounds, brk), spread(rounds, brk))
	}
	fmt.Println(cpu)
	fmt.Printf("load average at end: %s\n", loadavg())
	return nil
}

func pass(rate float64) string {
	if rate >= target {
		return "PASS"
	}
	return "BELOW TARGET"
}

func median(s []sample, f func(sample) float64) float64 {
	var v []float64
	for _, x := range s {
		v = append(v, f(x))
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func spread(s []sample, f func(sample) float64) string {
	var v []float64
	for _, x := range s {
		v = append(v, f(x))
	}
	return fmt.Sprintf("%.0f..%.0f", slices.Min(v), slices.Max(v))
}

// round purges scour's queues, publishes n notifications and drains them
// with a bus.
func (b *bench) round(n int) (sample, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return sample{}, err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(b.cfg.Nova.Exchange, "topic", false, false, false, false, nil); err != nil {
		return sample{}, err
	}
	for _, q := range []string{b.cfg.NotificationsQueue, b.cfg.HostQueue("compute")} {
		if _, err := ch.QueuePurge(q, false); err != nil && !isNotFound(err) {
			return sample{}, fmt.Errorf("purging %s: %w", q, err)
		}
		if ch.IsClosed() { // a purge of a queue not declared yet closes the channel
			if ch, err = b.conn.Channel(); err != nil {
				return sample{}, err
			}
			defer ch.Close()
		}
	}
	if err := b.publish(ch, n); err != nil {
		return sample{}, err
	}
	if b.profile != "" {
		f, err := os.Create(b.profile)
		if err != nil {
			return sample{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return sample{}, err
		}
		defer pprof.StopCPUProfile()
	}
	return b.scour(n)
}

func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

// publish sends n relevant notifications, each with a message id of its
// own, with confirms pipelined. In the first round scour's queue does not
// exist yet: the bus declares it, and the notifications are published
// once it is bound (the warm-up round waits for that, see scour).
func (b *bench) publish(ch *amqp.Channel, n int) error {
	var m map[string]any
	if err := json.Unmarshal(b.notif, &m); err != nil {
		return fmt.Errorf("%s: %w", b.o.sample, err)
	}
	// encode once, with a placeholder message id that each publish
	// replaces (same length, so the envelope stays valid)
	const placeholder = "bench-message-id-0000000000000000000000"
	m["message_id"] = placeholder
	m["timestamp"] = "2026-11-22 02:59:51.390927"
	inner, err := json.Marshal(m)
	if err != nil {
		return err
	}
	body, err := oslo.Encode(inner)
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	if err := b.declareQueue(ch); err != nil {
		return err
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
	runID := time.Now().UnixNano()
	for i := range n {
		id := fmt.Sprintf("bench-%019d-%013d", runID, i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, b.cfg.Nova.Exchange, "versioned_notifications.info", false, false, amqp.Publishing{
			ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent,
			Body: []byte(strings.Replace(string(body), placeholder, id[:len(placeholder)], 1)),
		})
		if err != nil {
			return err
		}
		if pending = append(pending, dc); len(pending) == 500 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// declareQueue declares scour's notifications queue as the bus does (the
// same arguments: a mismatch would fail the bus's declaration), so the
// first round's notifications are not published before it exists.
func (b *bench) declareQueue(ch *amqp.Channel) error {
	args := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		"x-delivery-limit": int64(b.cfg.DeliveryLimit), "x-dead-letter-exchange": b.cfg.UnroutableExchange()}
	if b.o.classic {
		args = nil
	}
	if _, err := ch.QueueDeclare(b.cfg.NotificationsQueue, true, false, false, false, args); err != nil {
		return err
	}
	return ch.QueueBind(b.cfg.NotificationsQueue, "versioned_notifications.info", b.cfg.Nova.Exchange, false, nil)
}

// scour drains the notifications queue with a bus.
func (b *bench) scour(n int) (sample, error) {
	var handled atomic.Int64
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bs, err := bus.New(b.cfg, "compute", bus.HandlerFunc(func(context.Context, *command.Command) error {
		handled.Add(1)
		return nil
	}), metrics.New(), log)
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
		if s.n != 0 && handled.Load() >= int64(n) {
			s.e2e = float64(s.n) / time.Since(m.start).Seconds()
			return s, nil
		}
		if time.Now().After(deadline) {
			return sample{}, fmt.Errorf("scour settled %d of %d notifications, handled %d commands in 10 minutes",
				bs.Stats().Notifications, n, handled.Load())
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
	for _, q := range []string{b.cfg.NotificationsQueue, b.cfg.HostQueue("compute"), b.cfg.PoisonQueue, b.cfg.UnroutableQueue()} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{b.cfg.Nova.Exchange, b.cfg.Exchange, b.cfg.UnroutableExchange()} {
		_ = ch.ExchangeDelete(x, false, false)
	}
}
