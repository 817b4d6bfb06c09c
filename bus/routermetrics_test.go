package bus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// runThroughRouter handles one message with a real watermill router (it
// puts the handler name in the message's context) and settles it as the
// subscriber would.
func runThroughRouter(t *testing.T, rm *routerMetrics, handler string, fail bool) *message.Message {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *message.Message, 1)
	sub := chanSub{in}
	r.AddMiddleware(rm.middleware)
	r.AddConsumerHandler(handler, "q", sub, func(*message.Message) error {
		if fail {
			return errors.New("boom")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	msg := message.NewMessage("1", nil)
	in <- msg
	select {
	case <-msg.Acked():
		rm.settled(msg, true)
	case <-msg.Nacked():
		rm.settled(msg, false)
	}
	close(in) // ends the handler, so Close does not wait for its timeout
	_ = r.Close()
	return msg
}

type chanSub struct{ c chan *message.Message }

func (s chanSub) Subscribe(context.Context, string) (<-chan *message.Message, error) { return s.c, nil }
func (s chanSub) Close() error                                                       { return nil }

func TestRouterMetricsKeepWatermillNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm, err := newRouterMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	runThroughRouter(t, rm, "dispatch-0", false)
	runThroughRouter(t, rm, "dispatch-0", true)
	want := `
# HELP scour_watermill_subscriber_messages_received_total The total number of messages received by the subscriber
# TYPE scour_watermill_subscriber_messages_received_total counter
scour_watermill_subscriber_messages_received_total{acked="acked",handler_name="dispatch-0",subscriber_name="subscriber"} 1
scour_watermill_subscriber_messages_received_total{acked="nacked",handler_name="dispatch-0",subscriber_name="subscriber"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "scour_watermill_subscriber_messages_received_total"); err != nil {
		t.Error(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != "scour_watermill_handler_execution_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	wantExec := map[string]uint64{"handler_name=dispatch-0,success=true": 1, "handler_name=dispatch-0,success=false": 1}
	if len(got) != len(wantExec) || got["handler_name=dispatch-0,success=true"] != 1 || got["handler_name=dispatch-0,success=false"] != 1 {
		t.Errorf("scour_watermill_handler_execution_time_seconds sample counts %v, want %v", got, wantExec)
	}
	// A second bus on the same registry shares the collectors.
	rm2, err := newRouterMetrics(reg)
	if err != nil || rm2.exec != rm.exec || rm2.received != rm.received {
		t.Errorf("second registration: %v (shared: %v)", err, rm2 != nil && rm2.exec == rm.exec)
	}
}
