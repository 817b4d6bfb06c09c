// Package metrics holds scour's Prometheus collectors on a registry of its
// own (never the global one), and the HTTP endpoints /metrics, /healthz and
// /readyz.
//
// Names follow <namespace>_<subsystem>_<name>_<unit>: counters end in
// _total, durations are histograms in seconds.
package metrics

import (
	"regexp"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/scour-project/scour/version"
)

// maxEventTypes bounds the event_type label: Nova has about 150 event
// types; anything past that is traffic we must not let grow the series set.
const maxEventTypes = 256

// OtherEventType replaces event types past the cardinality bound.
const OtherEventType = "other"

// Metrics are scour's own collectors. Methods are safe for concurrent use.
type Metrics struct {
	Registry *prometheus.Registry
	names    *namesRecorder

	received      *prometheus.CounterVec
	ignored       prometheus.Counter
	poisoned      *prometheus.CounterVec
	dispatched    *prometheus.CounterVec
	handled       *prometheus.HistogramVec
	brokerRetries *prometheus.CounterVec
	broadcasts    *prometheus.CounterVec
	routeLookups  *prometheus.HistogramVec

	mu         sync.Mutex
	eventTypes map[string]struct{}
}

// New registers scour's collectors (and the Go/process collectors) on a new
// registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		names:    &namesRecorder{reg: reg, seen: map[string]bool{}},
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "notifications", Name: "received_total",
			Help: "Notifications decoded, by event type and Nova format (versioned, legacy).",
		}, []string{"event_type", "format"}),
		ignored: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "notifications", Name: "ignored_total",
			Help: "Notifications acknowledged without action (event types scour does not act on).",
		}),
		poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "notifications", Name: "poisoned_total",
			Help: "Messages moved to the poison queue, by reason.",
		}, []string{"reason"}),
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "commands", Name: "dispatched_total",
			Help: "Commands published to scour's exchange (broker-confirmed), by kind and scope.",
		}, []string{"kind", "scope"}),
		handled: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "commands", Name: "handler_duration_seconds",
			Help:    "Time the command handler took, by kind and outcome (ok, retried, poisoned, duplicate).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"kind", "outcome"}),
		brokerRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "broker", Name: "retries_total",
			Help: "Failed broker operations that were retried, by operation (connect: the first connection; reconnect: after it dropped; resubscribe: a consumer that could not subscribe).",
		}, []string{"op"}),
		broadcasts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "commands", Name: "broadcasts_total",
			Help: "Instance-scoped broadcasts this dispatcher sent, by route: routed (only to the hosts holding a live claim of the instance) or sent to every host because routing is off, the lookup failed (lookup_failed) or found no host (unresolved).",
		}, []string{"route"}),
		routeLookups: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "commands", Name: "route_lookup_seconds",
			Help:    "Lookups of the hosts holding a live claim of a broadcast's instance (one per routed broadcast), by result (ok, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"result"}),
		eventTypes: map[string]struct{}{},
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "scour", Name: "build_info",
		Help: "Always 1; the labels say which scour build runs (version) and with which Go (goversion).",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version.Version, runtime.Version()).Set(1)
	// Every poison reason is exported at 0 from the start, so rate() and
	// increase() see the first poisoned message.
	for _, r := range PoisonReasons {
		m.poisoned.WithLabelValues(r)
	}
	for _, op := range []string{"connect", "reconnect", "resubscribe"} {
		m.brokerRetries.WithLabelValues(op)
	}
	for _, r := range BroadcastRoutes {
		m.broadcasts.WithLabelValues(r)
	}
	m.Registerer().MustRegister(m.received, m.ignored, m.poisoned, m.dispatched, m.handled, m.brokerRetries,
		m.broadcasts, m.routeLookups, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// PoisonReasons are the reason labels of scour_notifications_poisoned_total:
// the decoder's (notification.Reason) and the bus's own.
var PoisonReasons = []string{
	"too_large", "invalid_utf8", "not_json", "truncated", "not_object", "unknown_oslo_version",
	"envelope_message_not_string", "missing_event_type", "invalid_field", "bad_timestamp", "bad_payload",
	"missing_instance_uuid", "missing_volume_id", "invalid_id", "invalid_command", "unroutable",
	"delivery_limit", "dead_lettered", "misrouted", "handler_rejected", "panic",
}

// Registerer registers on the registry and remembers the metric names,
// for Names. Every part of scour registers through it.
func (m *Metrics) Registerer() prometheus.Registerer { return m.names }

// Names lists every metric family registered through Registerer, whether
// or not it has a series yet (dashboards and alert rules are checked
// against it).
func (m *Metrics) Names() []string {
	m.names.mu.Lock()
	defer m.names.mu.Unlock()
	out := make([]string, 0, len(m.names.seen))
	for n := range m.names.seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// namesRecorder is a Registerer that notes each collector's metric names.
type namesRecorder struct {
	reg  *prometheus.Registry
	mu   sync.Mutex
	seen map[string]bool
}

// fqNameRE reads the name out of a Desc's String (Desc has no getter).
var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *namesRecorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		if m := fqNameRE.FindStringSubmatch(d.String()); m != nil {
			r.seen[m[1]] = true
		}
	}
	return nil
}

func (r *namesRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *namesRecorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// NotificationReceived counts a decoded notification.
func (m *Metrics) NotificationReceived(eventType, format string) {
	m.received.WithLabelValues(m.boundEventType(eventType), format).Inc()
}

// NotificationIgnored counts a notification acked without action.
func (m *Metrics) NotificationIgnored() { m.ignored.Inc() }

// BrokerRetry counts a failed broker operation that is retried (op:
// connect, reconnect or resubscribe).
func (m *Metrics) BrokerRetry(op string) { m.brokerRetries.WithLabelValues(op).Inc() }

// Poisoned counts a message sent to the poison queue.
func (m *Metrics) Poisoned(reason string) { m.poisoned.WithLabelValues(reason).Inc() }

// CommandDispatched counts a confirmed command publish.
func (m *Metrics) CommandDispatched(kind, scope string) {
	m.dispatched.WithLabelValues(kind, scope).Inc()
}

// BroadcastRoutes are the route labels of scour_commands_broadcasts_total.
var BroadcastRoutes = []string{"routed", "off", "lookup_failed", "unresolved"}

// BroadcastSent counts one broadcast command by how it was sent.
func (m *Metrics) BroadcastSent(route string) { m.broadcasts.WithLabelValues(route).Inc() }

// BroadcastCounter is the scour_commands_broadcasts_total series of
// route (for tests).
func (m *Metrics) BroadcastCounter(route string) prometheus.Counter {
	return m.broadcasts.WithLabelValues(route)
}

// RouteLookup observes one lookup of a broadcast's hosts.
func (m *Metrics) RouteLookup(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.routeLookups.WithLabelValues(result).Observe(d.Seconds())
}

// CommandHandled observes one handler run.
func (m *Metrics) CommandHandled(kind, outcome string, d time.Duration) {
	m.handled.WithLabelValues(kind, outcome).Observe(d.Seconds())
}

func (m *Metrics) boundEventType(t string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.eventTypes[t]; ok {
		return t
	}
	if len(m.eventTypes) >= maxEventTypes {
		return OtherEventType
	}
	m.eventTypes[t] = struct{}{}
	return t
}
