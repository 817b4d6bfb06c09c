package images

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the Glance source does.
type Metrics struct {
	refused *prometheus.CounterVec
	fetches *prometheus.CounterVec
	bytes   prometheus.Counter
}

// NewMetrics registers the image metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "scour", Subsystem: "images", Name: "refused_total",
			Help: "Images refused (nothing programmed; the device stays reserved), by reason: hash_mismatch, size_mismatch, not_active, not_found, ambiguous, no_multihash, untrusted_owner, too_large, forbidden, insecure, unavailable, invalid."}, []string{"reason"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "scour", Subsystem: "images", Name: "fetches_total",
			Help: "Glance images resolved to verified bytes, by result: download, cache_hit, cache_corrupt (a cache entry failed its re-check and was fetched again)."}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "scour", Subsystem: "images", Name: "downloaded_bytes_total",
			Help: "Bytes downloaded from Glance (verified or not)."}),
	}
	if reg != nil {
		reg.MustRegister(m.refused, m.fetches, m.bytes)
	}
	return m
}

// Refused is the refusal counter for reason (tests read it).
func (m *Metrics) Refused(r Reason) prometheus.Counter { return m.refused.WithLabelValues(string(r)) }

// Fetches is the fetch counter for result: download, cache_hit, cache_corrupt.
func (m *Metrics) Fetches(result string) prometheus.Counter { return m.fetches.WithLabelValues(result) }

// Bytes counts downloaded bytes.
func (m *Metrics) Bytes() prometheus.Counter { return m.bytes }
