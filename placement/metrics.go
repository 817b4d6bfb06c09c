package placement

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are per client, registered on the registerer given to New
// (never the global one).
type metrics struct {
	requests           *prometheus.CounterVec
	retries            *prometheus.CounterVec
	skipped            prometheus.Counter
	traitsRecreated    prometheus.Counter
	cyborgListFailures *prometheus.CounterVec
	scanRequests       prometheus.Gauge
	scanSeconds        prometheus.Histogram
	writeWait          prometheus.Histogram
	writeConcurrency   prometheus.GaugeFunc
	checks             *prometheus.CounterVec
}

// newMetrics makes the client's metrics; writeConcurrency says, when
// scraped, how many writes the client allows in flight now.
func newMetrics(writeConcurrency func() float64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "requests_total",
			Help: "HTTP requests scour made to Placement, by method and outcome (ok, conflict, HTTP status, error).",
		}, []string{"method", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "retries_total",
			Help: "Placement requests retried, by reason: conflict (a write refused with a 409 generation conflict), changed (a device read again because its generation moved between two successful reads; routine) or error (network, timeout, 5xx, 429; not 401/403, which are not retried).",
		}, []string{"reason"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "requests_skipped_total",
			Help: "Placement requests failed at once, unsent, because Keystone refused scour's credentials less than a minute before (each would have been one more login attempt toward Keystone's lockout).",
		}),
		traitsRecreated: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "traits_recreated_total",
			Help: "CUSTOM_ traits scour created again because Placement answered that they did not exist (its database was rebuilt or restored under a running scour).",
		}),
		cyborgListFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "cyborg_list_failures_total",
			Help: "Listings of this host's Cyborg devices that failed (a trait Placement does not know, Placement failing past the retries), by the traits listed; the one-time-use devices are handled regardless (docs/cyborg.md).",
		}, []string{"traits"}),
		scanRequests: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "scour", Subsystem: "placement", Name: "last_scan_requests",
			Help: "Placement requests the last host scan made (2 + 1 or 2 per device once the node is known: 1 while its inventory is unchanged since the last read).",
		}),
		scanSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "placement", Name: "scan_duration_seconds",
			Help:    "Time a host scan took, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		writeWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "placement", Name: "write_wait_seconds",
			Help:    "Time each write to Placement (PUT, POST, DELETE) waited for one of the placement.max_parallel_writes slots before it was sent; its count is the writes sent, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		writeConcurrency: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "scour", Subsystem: "placement", Name: "write_concurrency",
			Help: "Writes to Placement this host allows in flight at once: placement.max_parallel_writes, or 1 for 10 minutes after Placement answered a write with 500 or 503 (until scourd restarts after sqlite's 500 database is locked).",
		}, writeConcurrency),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "placement", Name: "checks_total",
			Help: "Checks before a destructive step (Placement shows the device dirty?), by how they were answered: reused (from the release's complete read of the device, at most placement.check_reuse_window old, once; no request), listing (the read confirmed by one listing shared by the devices checked together) or read (the device read on its own).",
		}, []string{"how"}),
	}
	for _, how := range []string{"reused", "listing", "read"} {
		m.checks.WithLabelValues(how)
	}
	for _, reason := range []string{"conflict", "changed", "error"} {
		m.retries.WithLabelValues(reason) // exported at 0 from the start
	}
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.requests), r.Register(m.retries), r.Register(m.skipped), r.Register(m.traitsRecreated), r.Register(m.cyborgListFailures), r.Register(m.scanRequests), r.Register(m.scanSeconds), r.Register(m.writeWait), r.Register(m.writeConcurrency), r.Register(m.checks))
}
