package bus

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The subscriber's middleware settles each delivery exactly once, with the
// handler chain's verdict, and before watermill's own ack or nack.
func TestSubscriberMiddlewareSettlesOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler message.HandlerFunc
		wantAck bool
		panics  bool
	}{
		{"nil error acks", func(*message.Message) ([]*message.Message, error) { return nil, nil }, true, false},
		{"error nacks", func(*message.Message) ([]*message.Message, error) { return nil, errors.New("broker down") }, false, false},
		{"produced messages nack: only consumer handlers are supported", func(m *message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("x", nil)}, nil
		}, false, false},
		{"a panic nacks and goes on up", func(*message.Message) ([]*message.Message, error) { panic("bug") }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []settlement
			var notified []bool
			s := &subscriber{settled: func(queue string, _ *message.Message, acked bool) {
				if queue != "q" {
					t.Errorf("settled for queue %q, want q", queue)
				}
				notified = append(notified, acked)
			}}
			acks := newAcker(nil, 4)
			var pending sync.WaitGroup
			pending.Add(1)
			msg := message.NewMessage("m", nil)
			msg.SetContext(&delivery{Context: context.Background(), tag: 7, queue: "q", acks: acks,
				abandon: make(chan struct{}), pending: &pending})
			// watermill's decorator wraps the context before the handler runs
			msg.SetContext(context.WithValue(msg.Context(), struct{ k int }{1}, "handler"))
			var out []*message.Message
			var err error
			func() {
				defer func() {
					if r := recover(); (r != nil) != tc.panics {
						t.Errorf("recovered %v, want a panic: %v", r, tc.panics)
					}
				}()
				out, err = s.middleware(tc.handler)(msg)
			}()
			pending.Wait() // settled: Done was called
			close(acks.settled)
			for st := range acks.settled {
				got = append(got, st)
			}
			if len(got) != 1 || got[0] != (settlement{tag: 7, ack: tc.wantAck}) {
				t.Fatalf("settlements %+v, want one for tag 7 with ack=%v", got, tc.wantAck)
			}
			if len(notified) != 1 || notified[0] != tc.wantAck {
				t.Errorf("settled hook saw %v, want [%v]", notified, tc.wantAck)
			}
			if !tc.panics && (err == nil) != tc.wantAck || len(out) != 0 {
				t.Errorf("middleware returned %d messages, err %v: watermill must see the same verdict and no messages", len(out), err)
			}
		})
	}
}

// After the channel died, a verdict is dropped: the broker redelivers.
func TestSubscriberMiddlewareAbandoned(t *testing.T) {
	s := &subscriber{settled: func(string, *message.Message, bool) { t.Error("an abandoned delivery must not count as settled") }}
	acks := newAcker(nil, 4)
	abandon := make(chan struct{})
	close(abandon)
	var pending sync.WaitGroup
	pending.Add(1)
	msg := message.NewMessage("m", nil)
	msg.SetContext(&delivery{Context: context.Background(), tag: 1, queue: "q", acks: acks, abandon: abandon, pending: &pending})
	if _, err := s.middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(msg); err != nil {
		t.Fatal(err)
	}
	pending.Wait()
	if n := len(acks.settled); n != 0 {
		t.Errorf("%d settlements queued to a dead channel's acker", n)
	}
}

// A message that is not one of the subscriber's deliveries passes through.
func TestSubscriberMiddlewarePassesOtherMessages(t *testing.T) {
	s := &subscriber{}
	called := false
	if _, err := s.middleware(func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })(message.NewMessage("m", nil)); err != nil || !called {
		t.Errorf("called %v, err %v", called, err)
	}
}
