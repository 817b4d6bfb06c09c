package bus

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
// the run. Nothing waits for a batch to fill: every verdict received is
// sent in the same pass (a nack, or an ack beyond a still-running
// delivery, goes out on its own), so a slow handler never holds up other
// acks or the prefetch window. An ack is only ever sent for deliveries the
// router acked: a multiple ack at tag t is sent only when every tag <= t
// was acked by the router or already settled on the wire.
//
// Delivery tags on a channel start at 1 and increase by one per delivery;
// one acker serves one channel with one consumer.
type acker struct {
	ch      acknowledger
	settled chan settlement // verdicts, from the per-delivery waiters
	flush   chan struct{}   // closed: send what was received, then return

	low    uint64          // lowest tag not yet settled on the wire
	acked  map[uint64]bool // acked by the router, not yet sent
	onWire map[uint64]bool // tags > low already settled on the wire
}

func newAcker(ch acknowledger, prefetch int) *acker {
	return &acker{ch: ch, settled: make(chan settlement, prefetch), flush: make(chan struct{}),
		low: 1, acked: map[uint64]bool{}, onWire: map[uint64]bool{}}
}

// run sends verdicts until abandon is closed (the channel is gone: its
// unacked deliveries go back to the queue) or flush is closed (graceful
// stop: every waiter has handed its verdict over).
func (a *acker) run(abandon <-chan struct{}) {
	batch := make([]settlement, 0, cap(a.settled))
	for {
		select {
		case s := <-a.settled:
			batch = append(batch[:0], s)
		case <-a.flush:
			batch = a.drain(batch[:0])
			a.apply(batch)
			return
		case <-abandon:
			return
		}
		a.apply(a.drain(batch))
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

// apply sends batch: nacks (requeue) at once, then one multiple ack for
// the contiguous run from low, then single acks for the rest. Send errors
// are ignored: they mean the channel is closed, and the broker requeues
// whatever it did not get an ack for.
func (a *acker) apply(batch []settlement) {
	for _, s := range batch {
		if s.ack {
			a.acked[s.tag] = true
			continue
		}
		_ = a.ch.Nack(s.tag, false, true)
		a.onWire[s.tag] = true
	}
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
