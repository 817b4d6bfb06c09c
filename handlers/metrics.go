package handlers

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/placement"
)

// metrics are scour_lifecycle_*; registered on the caller's registry.
type metrics struct {
	commands      *prometheus.CounterVec // kind, outcome
	scans         *prometheus.CounterVec // result
	devices       *prometheus.GaugeVec   // state
	burns         *prometheus.CounterVec // result
	refences      *prometheus.CounterVec // result
	arqs          *prometheus.CounterVec // result
	cleansStarted prometheus.Counter
	cleansDone    *prometheus.CounterVec // verdict
	unreserves    *prometheus.CounterVec // result
	claimsSwept   prometheus.Counter
	requarantined prometheus.Counter
	recreated     *prometheus.CounterVec // knowledge
	orphaned      *prometheus.GaugeVec   // state (quarantined, retired)
	stuck         prometheus.Gauge
	broadcasts    *prometheus.CounterVec // kind, claim (live: acted on; none: nothing read)
	tombstones    *prometheus.CounterVec // result
}

// Command outcomes.
const (
	outcomeOK        = "ok"
	outcomePermanent = "permanent"
	outcomeTransient = "transient"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "scour", "lifecycle"
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "commands_total", Help: "Commands handled, by kind and outcome (ok, permanent, transient)."},
			[]string{"kind", "outcome"}),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "scans_total", Help: "Reconciler scans of this host's Placement tree, by result."},
			[]string{"result"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "devices", Help: "One-time-use devices of this host by state at the last scan (cleaning, absent, no-profile, backoff and retired are scour's own; retired: quarantined by an operator's scourctl retire, quarantined: by a cleaning)."},
			[]string{"state"}),
		burns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "burns_total", Help: "Burns (reserved=total) of devices Nova left unburned, by result."},
			[]string{"result"}),
		refences: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "refences_total", Help: "Devices found un-fenced while holding a tenant's data (Cyborg's device enable, an inventory rewrite, a re-created provider) and fenced again, by result."},
			[]string{"result"}),
		arqs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cyborg_arqs_total", Help: "Cyborg accelerator requests read at bind, by result (agree: recorded; mismatch: disagrees with this host's Placement tree or hardware, nothing touched; error: Cyborg not read, retried at the next scan)."},
			[]string{"result"}),
		cleansStarted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cleans_started_total", Help: "Cleaning runs started."}),
		cleansDone: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cleans_finished_total", Help: "Cleaning runs finished, by verdict (error: the cleaner failed)."},
			[]string{"verdict"}),
		unreserves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "unreserves_total", Help: "Un-reserves of cleaned devices, by result (ok, allocated, quarantined, elsewhere: un-reserved by someone else, stale: not un-reserved, cleaned again, error)."},
			[]string{"result"}),
		claimsSwept: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "claims_swept_total", Help: "Open claims released as orphans (no allocation, older than claim_expiry_time)."}),
		requarantined: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "quarantines_restored_total", Help: "Quarantines the store holds that a scan found missing in Placement (the trait or reserved=total lost: Nova replacing the device provider's traits, a failed write, an operator) and set again."}),
		recreated: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "providers_recreated_total", Help: "Devices whose provider a scan found re-created with a new UUID at the same PCI address while the store held, under the old one, a quarantine (moved to the new provider and set again) or a tenant not cleaned since (fenced again), by knowledge (quarantine, tenant)."},
			[]string{"knowledge"}),
		orphaned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "quarantines_orphaned", Help: "Open quarantines of the store whose provider is not in this host's Placement tree and no provider is at their address, at the last scan, by state (quarantined: a cleaning verdict, alerted on; retired: an operator's retirement, e.g. a device removed for an RMA, not alerted on)."},
			[]string{"state"}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "stuck_runs", Help: "Cleaning runs in flight for longer than stuck_after."}),
		broadcasts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "broadcasts_total", Help: "Instance-scoped broadcast commands (revert, evacuate, a delete without a host) this host received, by kind and whether it holds a live claim of the instance (live: acted on it; none: dropped without reading Placement)."},
			[]string{"kind", "claim"}),
		tombstones: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "tombstones_read_total", Help: "Deleted-instance tombstones read when a claim is recorded or rebuilt (before its write and again after it: a stale one counts at each read), by result (stood: Placement agreed the instance holds nothing here, no claim recorded; contradicted: Placement shows it holding devices here, so the tombstone was stale or written from a forged or misrouted delete.end; its devices were burned and claimed)."},
			[]string{"result"}),
	}
	for _, k := range command.Kinds {
		for _, o := range []string{outcomeOK, outcomePermanent, outcomeTransient} {
			m.commands.WithLabelValues(string(k), o)
		}
	}
	for _, v := range Verdicts {
		m.cleansDone.WithLabelValues(string(v))
	}
	m.cleansDone.WithLabelValues("error") // the cleaner failed: alerted on from 0
	for _, r := range []string{"ok", "allocated", "quarantined", "elsewhere", "stale", "error"} {
		m.unreserves.WithLabelValues(r)
	}
	m.scans.WithLabelValues("ok")
	for _, r := range []string{"agree", "mismatch", "error"} {
		m.arqs.WithLabelValues(r)
	}
	m.scans.WithLabelValues("error")
	for _, k := range []string{knowledgeQuarantine, knowledgeTenant} {
		m.recreated.WithLabelValues(k)
	}
	for _, st := range []string{string(placement.StateQuarantined), gaugeRetired} {
		m.orphaned.WithLabelValues(st) // alerted on from 0
	}
	for _, r := range []string{"stood", "contradicted"} {
		m.tombstones.WithLabelValues(r)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.commands, m.scans, m.devices, m.burns, m.refences, m.arqs, m.cleansStarted,
		m.cleansDone, m.unreserves, m.claimsSwept, m.requarantined, m.recreated, m.orphaned, m.stuck, m.broadcasts, m.tombstones} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}
