package app

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/claims"
)

// chainHeads makes a host's record chain head leave the host as it
// advances: a log line with the signed head (for an operator's log store)
// and a gauge; a new signing key or a chain started at record 1 is a WARN
// and counts on an alerting counter (docs/claims.md, The chain head).
type chainHeads struct {
	log    *slog.Logger
	head   prometheus.Gauge
	events *prometheus.CounterVec
}

func newChainHeads(log *slog.Logger, reg prometheus.Registerer) *chainHeads {
	c := &chainHeads{log: log,
		head: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "scour", Subsystem: "records", Name: "chain_head",
			Help: "Number of this host's newest signed cleaning record (its chain head); it never goes down unless the chain restarted or the head was lowered."}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "scour", Subsystem: "records", Name: "chain_events_total",
			Help: "Record chain events: key_created (a new signing key), chain_started (a record numbered 1 with no head before it). Expected once on a new host; elsewhere a lost state directory or store."},
			[]string{"event"}),
	}
	for _, e := range []string{"key_created", "chain_started"} {
		c.events.WithLabelValues(e)
	}
	if reg != nil {
		reg.MustRegister(c.head, c.events)
	}
	return c
}

// advanced is the store's WithChainHead callback.
func (c *chainHeads) advanced(h claims.ChainHead) {
	c.head.Set(float64(h.HostSeq))
	doc, _ := json.Marshal(h)
	if h.NewChain {
		c.events.WithLabelValues("chain_started").Inc()
		c.log.Warn("record chain started at record 1: expected for a host's first record; anywhere else the claims store was lost or replaced and the records before are not in it (compare with the chain heads logged before)",
			"host", h.Host, "run", h.RunID, "head", string(doc))
	}
	c.log.Info("record chain advanced", "host", h.Host, "seq", h.HostSeq, "record_sha256", h.RecordSHA256, "run", h.RunID, "head", string(doc))
}

// started sets the gauge from the store's head at start and logs it.
func (c *chainHeads) started(ctx context.Context, store *claims.Store, host string) error {
	h, ok, err := store.ChainHead(ctx, host)
	if err != nil || !ok {
		return err
	}
	c.head.Set(float64(h.HostSeq))
	doc, _ := json.Marshal(h)
	c.log.Info("record chain head", "host", host, "seq", h.HostSeq, "record_sha256", h.RecordSHA256, "head", string(doc))
	return nil
}
