package bus

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/scour-project/scour/command"
)

// HeaderCommands is the number of commands a message on scour's exchange
// carries (1 for a single command object, more for an array).
const HeaderCommands = "x-scour-commands"

// batcher publishes the dispatcher's commands, one broker-confirmed
// message per routing key for all the commands that are waiting at the
// same time (group commit). With nothing in flight a command goes out at
// once, alone: batching adds no latency. While a round of messages waits
// for its confirms, the commands that arrive queue per host; the next
// round sends one message per host that has any (at most
// command.MaxBatch commands each; the rest waits for the round after),
// all at once, and waits for their confirms together, so a burst over many
// hosts costs one broker round trip per round, not one per host. A
// confirmed publish to a quorum queue costs the broker far more than the
// command's bytes: a burst of releases costs it one publish, one delivery
// and one ack per host and round instead of per notification
// (bench-ingest, relevant mix).
//
// Every caller gets the outcome of the message that carried its command,
// and acks its notification only after that confirm: the ack discipline
// is unchanged. A caller whose context ends before its command was taken
// withdraws it; once taken, the command may still be delivered after the
// caller gave up, like any publish whose confirm was not awaited: the
// notification is requeued and the intake's de-duplication (and the
// handlers' idempotence) absorb the second copy.
type batcher struct {
	pub     sender
	observe func(n int) // batch size, per confirmed message

	mu      sync.Mutex
	pending map[string][]*batchReq // per routing key, arrival order
	keys    []string               // keys with pending commands, longest waiting first
	running bool                   // a round is being sent or confirmed
}

// sender publishes a message and returns a function that waits for the
// broker's confirm (*confirmPublisher).
type sender interface {
	Send(key string, msg *message.Message) (wait func() error, err error)
}

type batchReq struct {
	ctx       context.Context
	id        string // the notification delivery's id, names the message
	body      []byte // command.Marshal output
	confirmed func() // nil, or run on the flushing goroutine after a confirm
	done      chan error
	taken     bool // in a message being published (under batcher.mu)
}

func newBatcher(pub sender, observe func(int)) *batcher {
	return &batcher{pub: pub, observe: observe, pending: map[string][]*batchReq{}}
}

// publish sends the command body with routing key and returns once the
// message carrying it was confirmed (nil) or failed. confirmed, when not
// nil, runs once the message was confirmed, on the batcher's goroutine,
// after the callers of that round were told: the dispatcher logs and
// counts there, on a goroutine whose stack has already grown, instead of
// growing each delivery's new goroutine for slog (bench-ingest, relevant
// mix: about 5 µs per notification).
func (b *batcher) publish(ctx context.Context, key, id string, body []byte, confirmed func()) error {
	r := &batchReq{ctx: ctx, id: id, body: body, confirmed: confirmed, done: make(chan error, 1)}
	b.mu.Lock()
	if len(b.pending[key]) == 0 {
		b.keys = append(b.keys, key)
	}
	b.pending[key] = append(b.pending[key], r)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		b.withdraw(key, r)
		return ctx.Err()
	}
}

// withdraw removes r if no message has taken it yet.
func (b *batcher) withdraw(key string, r *batchReq) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.taken {
		return
	}
	q := slices.DeleteFunc(b.pending[key], func(x *batchReq) bool { return x == r })
	if len(q) > 0 {
		b.pending[key] = q
		return
	}
	delete(b.pending, key)
	b.keys = slices.DeleteFunc(b.keys, func(k string) bool { return k == key })
}

// outgoing is one message of a round.
type outgoing struct {
	key  string
	reqs []*batchReq
}

// flush sends rounds until nothing is pending.
func (b *batcher) flush() {
	for {
		round := b.take()
		if round == nil {
			return
		}
		waits := make([]func() error, len(round))
		errs := make([]error, len(round))
		for i, o := range round { // send them all, then wait for the confirms
			waits[i], errs[i] = b.send(o)
		}
		for i, o := range round {
			if errs[i] == nil {
				errs[i] = waits[i]()
			}
			if errs[i] == nil && b.observe != nil {
				b.observe(len(o.reqs))
			}
			for _, r := range o.reqs {
				r.done <- errs[i]
			}
		}
		for i, o := range round {
			for _, r := range o.reqs {
				if errs[i] == nil && r.confirmed != nil {
					r.confirmed()
				}
			}
		}
	}
}

// take removes the next round from pending: for every key, up to
// command.MaxBatch commands. It returns nil, and ends the flush, when
// nothing is pending.
func (b *batcher) take() []outgoing {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.keys) == 0 {
		b.running = false
		return nil
	}
	round := make([]outgoing, 0, len(b.keys))
	rest := b.keys[:0]
	for _, key := range b.keys {
		q := b.pending[key]
		n := min(len(q), command.MaxBatch)
		round = append(round, outgoing{key, q[:n:n]})
		for _, r := range q[:n] {
			r.taken = true
		}
		if n == len(q) {
			delete(b.pending, key)
		} else {
			b.pending[key] = q[n:]
			rest = append(rest, key)
		}
	}
	b.keys = rest
	return round
}

func (b *batcher) send(o outgoing) (func() error, error) {
	bodies := make([][]byte, len(o.reqs))
	for i, r := range o.reqs {
		bodies[i] = r.body
	}
	body, err := command.MarshalBatch(bodies)
	if err != nil {
		return nil, err
	}
	out := message.NewMessage(o.reqs[0].id+"/commands", body)
	// the first caller's context bounds the confirm wait: every caller's is
	// its delivery's, which only a hard stop cancels
	out.SetContext(o.reqs[0].ctx)
	out.Metadata.Set(HeaderCommands, strconv.Itoa(len(o.reqs)))
	return b.pub.Send(o.key, out)
}
