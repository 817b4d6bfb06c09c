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
// the run. Nacks go out at once. Sending each ack as it came cost a write
// per message, more CPU than the bare consume-and-ack loop of bench-ingest
// spends on its acks, so:
//
//   - the contiguous run goes out as one multiple ack once it covers a
//     quarter of the prefetch window, or after ackLinger;
//   - acks past a delivery still running (a notification waiting for its
//     command's confirm, a slow handler) wait for that delivery, which
//     usually settles within milliseconds and lets one multiple ack cover
//     them all; they go out singly only once they have waited
//     singleLinger. Sending them singly at the linger, or as soon as half
//     the prefetch window was held, made the 90%-ignored mix of
//     bench-ingest send a frame for every fourth delivery, nearly all
//     singles; holding them until covered sent 367 frames, all multiple,
//     for 40,000 deliveries, and halved scourd's CPU per notification,
//     although the window may fill with held acks until the running
//     delivery settles (at most singleLinger).
//
// So no ack waits longer than singleLinger. An ack is only ever sent for
// deliveries the router acked: a multiple ack at tag t is sent only when
// every tag <= t was acked by the router or already settled on the wire. A channel that
// dies with acks held gets those deliveries redelivered, like any delivery
// whose ack was lost: the intake's de-duplication and idempotent handlers
// absorb them.
//
// Delivery tags on a channel start at 1 and increase by one per delivery;
// one acker serves one channel with one consumer.
type acker struct {
	ch           acknowledger
	settled      chan settlement // verdicts, from the subscriber's middleware
	flush        chan struct{}   // closed: send what was received, then return
	linger       time.Duration   // longest the contiguous run waits to grow
	singleLinger time.Duration   // longest an ack past a running delivery waits
	enough       int             // run length sent without lingering

	low     uint64               // lowest tag not yet settled on the wire
	next    uint64               // tags low..next-1 are all acked or on the wire: the run
	runAcks int                  // router acks held in the run
	runTop  uint64               // the highest of them: the tag a multiple ack names
	acked   map[uint64]time.Time // acked by the router (when), not yet sent
	onWire  map[uint64]bool      // tags > low already settled on the wire
}

func newAcker(ch acknowledger, prefetch int) *acker {
	return &acker{ch: ch, settled: make(chan settlement, prefetch), flush: make(chan struct{}),
		linger: ackLinger, singleLinger: singleAckLinger,
		enough: max(prefetch/4, 1),
		low:    1, next: 1, acked: map[uint64]time.Time{}, onWire: map[uint64]bool{}}
}

const (
	// ackLinger bounds how long the contiguous run waits for company.
	ackLinger = 2 * time.Millisecond
	// singleAckLinger bounds how long an ack past a running delivery
	// waits to be covered by a multiple ack: longer than a quorum queue's
	// publisher confirm (what a dispatched notification waits for), far
	// shorter than anything the broker or an operator would notice.
	singleAckLinger = 25 * time.Millisecond
)

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
			if a.runAcks >= a.enough {
				a.sendRun()
			}
		case now := <-timer.C:
			armed = false
			a.sendRun()
			if a.heldSince(now) >= a.singleLinger {
				a.send()
			}
		case <-a.flush:
			a.record(a.drain(batch[:0]))
			a.send()
			return
		case <-abandon:
			return
		}
		if len(a.acked) > 0 && !armed {
			timer.Reset(a.linger)
			armed = true
		}
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
	now := time.Now()
	for _, s := range batch {
		if s.ack {
			a.acked[s.tag] = now
		} else {
			_ = a.ch.Nack(s.tag, false, true)
			a.onWire[s.tag] = true
		}
	}
	for { // extend the run (each tag is passed once)
		if _, ok := a.acked[a.next]; ok {
			a.runAcks++
			a.runTop = a.next
		} else if !a.onWire[a.next] {
			return
		}
		a.next++
	}
}

// heldSince is how long the oldest held ack has waited at now.
func (a *acker) heldSince(now time.Time) time.Duration {
	var d time.Duration
	for _, at := range a.acked {
		d = max(d, now.Sub(at))
	}
	return d
}

// sendRun puts the contiguous run from low on the wire as one multiple
// ack, if it holds any ack. The ack names the run's highest held tag, not
// its end: a tag already settled on the wire is unknown to the broker,
// which closes the channel for it.
func (a *acker) sendRun() {
	if a.runAcks > 0 {
		_ = a.ch.Ack(a.runTop, true)
	}
	for ; a.low < a.next; a.low++ {
		delete(a.acked, a.low)
		delete(a.onWire, a.low)
	}
	a.runAcks = 0
}

// send puts every held ack on the wire: one multiple ack for the
// contiguous run from low, then single acks for the rest.
func (a *acker) send() {
	a.sendRun()
	for tag := range a.acked {
		_ = a.ch.Ack(tag, false)
		delete(a.acked, tag)
		a.onWire[tag] = true
	}
}
