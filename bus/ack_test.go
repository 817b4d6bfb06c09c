package bus

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
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
				a.record(b) // one pass of run: verdicts received, then sent
				a.send()
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

// lockedAcks is fakeAcks for an acker running in its own goroutine.
type lockedAcks struct {
	mu sync.Mutex
	fakeAcks
}

func (l *lockedAcks) Ack(tag uint64, multiple bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakeAcks.Ack(tag, multiple)
}

func (l *lockedAcks) Nack(tag uint64, multiple, requeue bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakeAcks.Nack(tag, multiple, requeue)
}

func (l *lockedAcks) wire() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent)
}

// Acks linger to share one frame, but are sent after the linger even when
// no more come; nacks never wait; a quarter of the window goes at once.
func TestAckerLingersThenSends(t *testing.T) {
	f := &lockedAcks{}
	a := newAcker(f, 32) // enough = 8
	a.linger = 20 * time.Millisecond
	for tag := uint64(1); tag <= 3; tag++ {
		a.settled <- settlement{tag: tag, ack: true}
	}
	a.settled <- settlement{tag: 4} // a nack
	startAcker(t, a)
	if got := waitWire(t, f, 1); got[0] != "nack 4 multiple=false requeue=true" {
		t.Fatalf("first frame %q, want the nack, at once", got)
	}
	if got := waitWire(t, f, 2); !slices.Equal(got, []string{"nack 4 multiple=false requeue=true", "ack 3 multiple=true"}) {
		t.Fatalf("wire %q: three acks must leave in one frame after the linger", got)
	}
	for tag := uint64(5); tag <= 12; tag++ { // 8 = enough: no linger
		a.settled <- settlement{tag: tag, ack: true}
	}
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(f.wire(), "ack 12 multiple=true"); {
		if time.Now().After(deadline) {
			t.Fatalf("wire %q: tags 5..12 never acked", f.wire())
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.wire(); len(got) > 4 {
		t.Errorf("wire %q: 12 settlements in %d frames, acks not coalesced", got, len(got))
	}
}

// startAcker runs a on its own goroutine until the test ends.
func startAcker(t *testing.T, a *acker) {
	abandon := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); a.run(abandon) }()
	t.Cleanup(func() { close(abandon); <-done })
}

func waitWire(t *testing.T, f *lockedAcks, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(f.wire()) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("wire %q, want %d frames", f.wire(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return f.wire()
}

// Acks past a delivery that is still running (a notification waiting for
// its command's confirm) are not sent singly at the linger: once that
// delivery settles, one multiple ack covers them all.
func TestAckerHoldsAcksPastARunningDelivery(t *testing.T) {
	f := &lockedAcks{}
	a := newAcker(f, 32) // enough 8
	a.linger, a.singleLinger = time.Millisecond, time.Hour
	startAcker(t, a)
	for tag := uint64(2); tag <= 11; tag++ { // tag 1 still running
		a.settled <- settlement{tag: tag, ack: true}
	}
	time.Sleep(50 * time.Millisecond) // many lingers: the run from tag 1 is empty
	if got := f.wire(); len(got) != 0 {
		t.Fatalf("wire %q: acks past a running delivery went out singly", got)
	}
	a.settled <- settlement{tag: 1, ack: true}
	if got := waitWire(t, f, 1); !slices.Equal(got, []string{"ack 11 multiple=true"}) {
		t.Fatalf("wire %q, want one multiple ack for tags 1..11", got)
	}
}

// A delivery that stays running does not hold later acks for longer than
// singleLinger: they then go out singly.
func TestAckerSendsHeldAcksAfterSingleLinger(t *testing.T) {
	f := &lockedAcks{}
	a := newAcker(f, 32)
	a.linger, a.singleLinger = time.Millisecond, 30*time.Millisecond
	startAcker(t, a)
	for tag := uint64(2); tag <= 5; tag++ { // tag 1 never settles
		a.settled <- settlement{tag: tag, ack: true}
	}
	got := slices.Clone(waitWire(t, f, 4))
	slices.Sort(got)
	if want := []string{"ack 2 multiple=false", "ack 3 multiple=false", "ack 4 multiple=false", "ack 5 multiple=false"}; !slices.Equal(got, want) {
		t.Fatalf("wire %q, want %q", got, want)
	}
}
