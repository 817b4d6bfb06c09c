package placement

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are per client, registered on the registerer given to New
// (never the global one).
type metrics struct {
	requests     *prometheus.CounterVec
	scanRequests prometheus.Gauge
	scanSeconds  prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "requests_total",
			Help: "HTTP requests scour made to Placement, by method and outcome (ok, conflict, HTTP status, error).",
		}, []string{"method", "outcome"}),
		scanRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "scour", Subsystem: "placement", Name: "last_scan_requests",
			Help: "Placement requests the last host scan made (2 + 2 per device once the node is known).",
		}),
		scanSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "placement", Name: "scan_duration_seconds",
			Help:    "Time a host scan took, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.requests), r.Register(m.scanRequests), r.Register(m.scanSeconds))
}
