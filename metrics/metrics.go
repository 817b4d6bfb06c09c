// Package metrics holds scour's Prometheus collectors on a registry of its
// own (never the global one), and the HTTP endpoints /metrics, /healthz and
// /readyz.
//
// Names follow <namespace>_<subsystem>_<name>_<unit>: counters end in
// _total, durations are histograms in seconds.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// maxEventTypes bounds the event_type label: Nova has about 150 event
// types; anything past that is traffic we must not let grow the series set.
const maxEventTypes = 256

// OtherEventType replaces event types past the cardinality bound.
const OtherEventType = "other"

// Metrics are scour's own collectors. Methods are safe for concurrent use.
type Metrics struct {
	Registry *prometheus.Registry

	received   *prometheus.CounterVec
	ignored    prometheus.Counter
	poisoned   *prometheus.CounterVec
	dispatched *prometheus.CounterVec
	handled    *prometheus.HistogramVec
	batch      prometheus.Histogram

	mu         sync.Mutex
	eventTypes map[string]struct{}
}

// New registers scour's collectors (and the Go/process collectors) on a new
// registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
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
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "commands", Name: "batch_size",
			Help:    "Commands per message published to scour's exchange (commands that wait at the same time for the same host share one message).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1 .. 256 (command.MaxBatch)
		}),
		eventTypes: map[string]struct{}{},
	}
	reg.MustRegister(m.received, m.ignored, m.poisoned, m.dispatched, m.handled, m.batch,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// NotificationReceived counts a decoded notification.
func (m *Metrics) NotificationReceived(eventType, format string) {
	m.received.WithLabelValues(m.boundEventType(eventType), format).Inc()
}

// NotificationIgnored counts a notification acked without action.
func (m *Metrics) NotificationIgnored() { m.ignored.Inc() }

// Poisoned counts a message sent to the poison queue.
func (m *Metrics) Poisoned(reason string) { m.poisoned.WithLabelValues(reason).Inc() }

// CommandDispatched counts a confirmed command publish.
func (m *Metrics) CommandDispatched(kind, scope string) {
	m.dispatched.WithLabelValues(kind, scope).Inc()
}

// CommandBatch observes the size of one confirmed command message.
func (m *Metrics) CommandBatch(n int) { m.batch.Observe(float64(n)) }

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
