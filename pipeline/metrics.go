package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	stepSeconds *prometheus.HistogramVec
	steps       *prometheus.CounterVec
	progress    *prometheus.GaugeVec
	inFlight    prometheus.Gauge
	runs        *prometheus.CounterVec
	retirements *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "step_duration_seconds",
			Help:    "Time a cleaning step took, by profile, step and outcome.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1s .. ~18h
		}, []string{"profile", "step", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "steps_total",
			Help: "Cleaning steps finished, by profile, step and outcome (succeeded, failed, skipped).",
		}, []string{"profile", "step", "outcome"}),
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "step_progress_ratio",
			Help: "Progress (0..1) of the cleaning step running on a device.",
		}, []string{"device", "step"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "runs_in_flight",
			Help: "Cleaning runs in progress on this host.",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "runs_total",
			Help: "Cleaning runs finished, by profile and verdict.",
		}, []string{"profile", "verdict"}),
		retirements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "scour", Subsystem: "pipeline", Name: "retirements_total",
			Help: "Devices retired (quarantined because a step said retire, e.g. a worn drive), by profile and whether the retirement wipe erased them first (wiped=\"false\": the device may still hold the last tenant's data; destroy it).",
		}, []string{"profile", "wiped"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.stepSeconds, m.steps, m.progress, m.inFlight, m.runs, m.retirements} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) stepDone(profile, step, outcome string, took time.Duration) {
	m.steps.WithLabelValues(profile, step, outcome).Inc()
	if outcome != string(StepSkipped) {
		m.stepSeconds.WithLabelValues(profile, step, outcome).Observe(took.Seconds())
	}
}
