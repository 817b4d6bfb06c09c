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
// once, alone: batching adds no latency. Under load, while up to
// `flushers` messages wait for their confirms, the commands that arrive
// queue per host and leave together in the next message (at most
// command.MaxBatch each, hosts served in turn). A confirmed publish to a
// quorum queue costs the broker far more than the command's bytes, so a
// burst of releases costs it one publish, one delivery and one ack per
// host instead of per notification (bench-ingest: the relevant mix).
//
// Every caller gets the outcome of the message that carried its command,
// and acks its notification only after that confirm: the ack discipline
// is unchanged. A caller whose context ends before its command was taken
// withdraws it; once taken, the command may still be delivered after the
// caller gave up, like any publish whose confirm was not awaited: the
// notification is requeued and the intake's de-duplication (and the
// handlers' idempotence) absorb the second copy.
type batcher struct {
	pub      confirmer
	flushers int
	observe  func(n int) // batch size, per confirmed message

	mu      sync.Mutex
	pending map[string][]*batchReq // per routing key, arrival order
	keys    []string               // keys with pending commands, longest waiting first
	running int                    // flush goroutines
}

// confirmer publishes and returns once the broker confirmed
// (*confirmPublisher).
type confirmer interface {
	Publish(topic string, msgs ...*message.Message) error
}

type batchReq struct {
	ctx   context.Context
	id    string // the notification delivery's id, names the message
	body  []byte // command.Marshal output
	done  chan error
	taken bool // in a message being published (under batcher.mu)
}

func newBatcher(pub confirmer, flushers int, observe func(int)) *batcher {
	return &batcher{pub: pub, flushers: max(flushers, 1), observe: observe, pending: map[string][]*batchReq{}}
}

// publish sends the command body with routing key and returns once the
// message carrying it was confirmed (nil) or failed.
func (b *batcher) publish(ctx context.Context, key, id string, body []byte) error {
	r := &batchReq{ctx: ctx, id: id, body: body, done: make(chan error, 1)}
	b.mu.Lock()
	if len(b.pending[key]) == 0 {
		b.keys = append(b.keys, key)
	}
	b.pending[key] = append(b.pending[key], r)
	start := b.running < b.flushers
	if start {
		b.running++
	}
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

// flush publishes what is pending, a message at a time, until nothing is.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		if len(b.keys) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		key := b.keys[0]
		q := b.pending[key]
		n := min(len(q), command.MaxBatch)
		batch := q[:n:n]
		if n == len(q) {
			delete(b.pending, key)
			b.keys = b.keys[1:]
		} else { // the rest waits behind the other hosts
			b.pending[key] = q[n:]
			b.keys = append(b.keys[1:], key)
		}
		for _, r := range batch {
			r.taken = true
		}
		b.mu.Unlock()
		err := b.send(key, batch)
		for _, r := range batch {
			r.done <- err
		}
	}
}

func (b *batcher) send(key string, batch []*batchReq) error {
	bodies := make([][]byte, len(batch))
	for i, r := range batch {
		bodies[i] = r.body
	}
	body, err := command.MarshalBatch(bodies)
	if err != nil {
		return err
	}
	out := message.NewMessage(batch[0].id+"/commands", body)
	// the first caller's context bounds the confirm wait: every caller's is
	// its delivery's, which only a hard stop cancels
	out.SetContext(batch[0].ctx)
	out.Metadata.Set(HeaderCommands, strconv.Itoa(len(batch)))
	if err := b.pub.Publish(key, out); err != nil {
		return err
	}
	if b.observe != nil {
		b.observe(len(batch))
	}
	return nil
}
