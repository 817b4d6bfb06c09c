package bus

import "time"

// settlement is the router's verdict on one delivery of a channel.
type settlement struct {
	tag uint64
	ack bool
}

// acknowledger is the part of *amqp.Channel the acker uses.
type acknowledger interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// acker sends a consumer channel's acks and nacks from one goroutine, and
// coalesces acks: when the deliveries settled so far form a contiguous run
// from the lowest unsettled delivery tag, one ack with multiple=true covers
// the run. Nacks go out at once. Acks linger briefly (ackLinger, or until
// a quarter of the prefetch window is waiting) so that one frame and one
// write cover many deliveries: sending each as it came cost a write per
// message, more CPU than the bare consume-and-ack loop of bench-ingest
// spends on its acks. What lingers is then sent whole (acks past a
// still-running delivery singly), so a slow handler never holds up other
// acks or the prefetch window for longer than the linger. An ack is only
// ever sent for deliveries the router acked: a multiple ack at tag t is
// sent only when every tag <= t was acked by the router or already settled
// on the wire. A channel that dies with acks lingering gets those
// deliveries redelivered, like any delivery whose ack was lost: the
// intake's de-duplication and idempotent handlers absorb them.
//
// Delivery tags on a channel start at 1 and increase by one per delivery;
// one acker serves one channel with one consumer.
type acker struct {
	ch      acknowledger
	settled chan settlement // verdicts, from the subscriber's middleware
	flush   chan struct{}   // closed: send what was received, then return
	linger  time.Duration   // longest an ack waits to share a frame
	enough  int             // acks waiting that are sent without lingering

	low    uint64          // lowest tag not yet settled on the wire
	acked  map[uint64]bool // acked by the router, not yet sent
	onWire map[uint64]bool // tags > low already settled on the wire
}

func newAcker(ch acknowledger, prefetch int) *acker {
	return &acker{ch: ch, settled: make(chan settlement, prefetch), flush: make(chan struct{}),
		linger: ackLinger, enough: max(prefetch/4, 1),
		low: 1, acked: map[uint64]bool{}, onWire: map[uint64]bool{}}
}

// ackLinger bounds how long a router ack waits for company.
const ackLinger = 2 * time.Millisecond

// run sends verdicts until abandon is closed (the channel is gone: its
// unacked deliveries go back to the queue) or flush is closed (graceful
// stop: every in-flight delivery has had its verdict handed over).
func (a *acker) run(abandon <-chan struct{}) {
	batch := make([]settlement, 0, cap(a.settled))
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		select {
		case s := <-a.settled:
			a.record(a.drain(append(batch[:0], s)))
			switch {
			case len(a.acked) >= a.enough:
				a.send()
			case len(a.acked) > 0 && !armed:
				timer.Reset(a.linger)
				armed = true
			}
			continue
		case <-timer.C:
			armed = false
		case <-a.flush:
			a.record(a.drain(batch[:0]))
			a.send()
			return
		case <-abandon:
			return
		}
		a.send()
	}
}

// drain appends every verdict already queued.
func (a *acker) drain(batch []settlement) []settlement {
	for {
		select {
		case s := <-a.settled:
			batch = append(batch, s)
		default:
			return batch
		}
	}
}

// record sends batch's nacks (requeue) at once and keeps its acks for send.
// Send errors are ignored here and in send: they mean the channel is
// closed, and the broker requeues whatever it did not get an ack for.
func (a *acker) record(batch []settlement) {
	for _, s := range batch {
		if s.ack {
			a.acked[s.tag] = true
			continue
		}
		_ = a.ch.Nack(s.tag, false, true)
		a.onWire[s.tag] = true
	}
}

// send puts every recorded ack on the wire: one multiple ack for the
// contiguous run from low, then single acks for the rest.
func (a *acker) send() {
	var upTo uint64
	for {
		if a.acked[a.low] {
			delete(a.acked, a.low)
			upTo = a.low
		} else if a.onWire[a.low] {
			delete(a.onWire, a.low)
		} else {
			break
		}
		a.low++
	}
	if upTo != 0 {
		_ = a.ch.Ack(upTo, true)
	}
	for tag := range a.acked {
		_ = a.ch.Ack(tag, false)
		delete(a.acked, tag)
		a.onWire[tag] = true
	}
}
