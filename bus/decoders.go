package bus

import (
	"errors"
	"sync"

	"github.com/scour-project/scour/notification"
)

// decoders runs notification decoding on a few long-lived goroutines.
//
// The watermill router runs every message on a goroutine of its own, which
// starts with a small stack; the decoder's descent through the oslo
// envelope, the message and Nova's payload objects outgrew it, so the
// runtime grew and copied the stack of nearly every notification: about a
// sixth of scourd's CPU per notification in bench-ingest's profile
// (runtime.newstack under the decoder). A decoding goroutine grows its
// stack once and keeps it; handing a body over and the event back costs two
// channel operations.
type decoders struct {
	dec  notification.Decoder
	jobs chan *decodeJob
	quit chan struct{}
	stop sync.Once
	wg   sync.WaitGroup
}

// errDecodersStopped: the bus is stopping; the message is requeued.
var errDecodersStopped = errors.New("decoding stopped: shutting down")

type decodeJob struct {
	body []byte
	ev   *notification.Event
	err  error
	done chan struct{}
}

var jobPool = sync.Pool{New: func() any { return &decodeJob{done: make(chan struct{}, 1)} }}

func newDecoders(dec notification.Decoder, n int) *decoders {
	d := &decoders{dec: dec, jobs: make(chan *decodeJob), quit: make(chan struct{})}
	d.wg.Add(n)
	for range n {
		go func() {
			defer d.wg.Done()
			for {
				select {
				case j := <-d.jobs:
					j.ev, j.err = d.dec.Decode(j.body)
					j.done <- struct{}{}
				case <-d.quit:
					return
				}
			}
		}()
	}
	return d
}

// Decode decodes body on one of the goroutines; after Close it returns
// errDecodersStopped.
func (d *decoders) Decode(body []byte) (*notification.Event, error) {
	j := jobPool.Get().(*decodeJob)
	j.body = body
	select {
	case d.jobs <- j:
	case <-d.quit:
		jobPool.Put(j)
		return nil, errDecodersStopped
	}
	<-j.done // a goroutine that took the job finishes it
	ev, err := j.ev, j.err
	*j = decodeJob{done: j.done}
	jobPool.Put(j)
	return ev, err
}

// Close stops the goroutines once the jobs they hold are done.
func (d *decoders) Close() {
	d.stop.Do(func() { close(d.quit) })
	d.wg.Wait()
}
