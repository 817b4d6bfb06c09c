package bus

import (
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
)

// routerMetrics are the router metrics watermill's Prometheus builder
// registers (scour_watermill_handler_execution_time_seconds and
// scour_watermill_subscriber_messages_received_total, same names, labels
// and buckets, so dashboards keep working), recorded without its
// per-message costs: watermill's subscriber decorator starts a goroutine
// per message and both build a label map per message; here the observers
// are resolved once per handler and the received counter is incremented
// by the subscriber when it settles the delivery.
type routerMetrics struct {
	exec     *prometheus.HistogramVec
	received *prometheus.CounterVec
	handlers sync.Map // handler name -> *handlerObservers
}

type handlerObservers struct {
	ok, failed    prometheus.Observer
	acked, nacked prometheus.Counter
}

func newRouterMetrics(reg prometheus.Registerer) (*routerMetrics, error) {
	exec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "scour", Subsystem: "watermill", Name: "handler_execution_time_seconds",
		Help:    "The total time elapsed while executing the handler function in seconds",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
	}, []string{"handler_name", "success"})
	received := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "scour", Subsystem: "watermill", Name: "subscriber_messages_received_total",
		Help: "The total number of messages received by the subscriber",
	}, []string{"handler_name", "subscriber_name", "acked"})
	var err error
	if exec, err = register(reg, exec); err != nil {
		return nil, err
	}
	if received, err = register(reg, received); err != nil {
		return nil, err
	}
	return &routerMetrics{exec: exec, received: received}, nil
}

// register registers c, or returns the collector already registered under
// its name (a second Bus on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *routerMetrics) forHandler(name string) *handlerObservers {
	if o, ok := m.handlers.Load(name); ok {
		return o.(*handlerObservers)
	}
	o := &handlerObservers{
		ok:     m.exec.WithLabelValues(name, "true"),
		failed: m.exec.WithLabelValues(name, "false"),
		acked:  m.received.WithLabelValues(name, "subscriber", "acked"),
		nacked: m.received.WithLabelValues(name, "subscriber", "nacked"),
	}
	actual, _ := m.handlers.LoadOrStore(name, o)
	return actual.(*handlerObservers)
}

// middleware times each handler run (success = the handler, with the
// middleware inside this one, returned nil).
func (m *routerMetrics) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		start := time.Now()
		out, err := h(msg)
		o := m.forHandler(message.HandlerNameFromCtx(msg.Context()))
		if err != nil {
			o.failed.Observe(time.Since(start).Seconds())
		} else {
			o.ok.Observe(time.Since(start).Seconds())
		}
		return out, err
	}
}

// settled counts a delivery the subscriber acked or nacked.
func (m *routerMetrics) settled(msg *message.Message, acked bool) {
	o := m.forHandler(message.HandlerNameFromCtx(msg.Context()))
	if acked {
		o.acked.Inc()
	} else {
		o.nacked.Inc()
	}
}
