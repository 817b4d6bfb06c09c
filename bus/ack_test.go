package bus

import (
	"fmt"
	"slices"
	"testing"
)

// fakeAcks records what the acker put on the wire.
type fakeAcks struct{ sent []string }

func (f *fakeAcks) Ack(tag uint64, multiple bool) error {
	f.sent = append(f.sent, fmt.Sprintf("ack %d multiple=%v", tag, multiple))
	return nil
}

func (f *fakeAcks) Nack(tag uint64, multiple, requeue bool) error {
	f.sent = append(f.sent, fmt.Sprintf("nack %d multiple=%v requeue=%v", tag, multiple, requeue))
	return nil
}

func TestAckerCoalescesOnlyContiguousAcks(t *testing.T) {
	ack := func(tag uint64) settlement { return settlement{tag: tag, ack: true} }
	nack := func(tag uint64) settlement { return settlement{tag: tag} }
	for _, tc := range []struct {
		name    string
		batches [][]settlement
		want    []string
	}{
		{"one at a time", [][]settlement{{ack(1)}, {ack(2)}},
			[]string{"ack 1 multiple=true", "ack 2 multiple=true"}},
		{"contiguous run, any order", [][]settlement{{ack(3), ack(1), ack(2)}},
			[]string{"ack 3 multiple=true"}},
		{"gap: acks past a running delivery go out singly, not held", [][]settlement{{ack(1), ack(3)}, {ack(2)}},
			[]string{"ack 1 multiple=true", "ack 3 multiple=false", "ack 2 multiple=true"}},
		{"a nack is never covered by a multiple ack", [][]settlement{{ack(1), nack(2), ack(3)}},
			[]string{"nack 2 multiple=false requeue=true", "ack 3 multiple=true"}},
		{"nothing settled below: nothing acked", [][]settlement{{nack(1)}, {ack(2)}},
			[]string{"nack 1 multiple=false requeue=true", "ack 2 multiple=true"}},
		{"run resumes after singles", [][]settlement{{ack(2)}, {ack(4)}, {ack(1)}, {ack(3), ack(5)}},
			[]string{"ack 2 multiple=false", "ack 4 multiple=false", "ack 1 multiple=true", "ack 5 multiple=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAcks{}
			a := newAcker(f, 8)
			for _, b := range tc.batches {
				a.apply(b)
			}
			if !slices.Equal(f.sent, tc.want) {
				t.Errorf("sent %q, want %q", f.sent, tc.want)
			}
			if len(a.acked) != 0 {
				t.Errorf("acks left unsent: %v", a.acked)
			}
		})
	}
}

// TestAckerFlushSendsEverythingReceived: a graceful stop sends every
// verdict handed over before it returns.
func TestAckerFlushSendsEverythingReceived(t *testing.T) {
	f := &fakeAcks{}
	a := newAcker(f, 8)
	for tag := uint64(1); tag <= 5; tag++ {
		a.settled <- settlement{tag: tag, ack: tag != 4}
	}
	close(a.flush)
	a.run(make(chan struct{}))
	want := []string{"nack 4 multiple=false requeue=true", "ack 5 multiple=true"}
	// the run may have taken the first verdicts before flushing
	if !slices.Equal(f.sent[len(f.sent)-2:], want) || a.low != 6 {
		t.Errorf("sent %q (low %d), want it to end with %q and low 6", f.sent, a.low, want)
	}
}
