package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/scour-project/scour/command"
)

// gatedPublisher records what it is asked to send and holds each
// confirm until the test releases it.
type gatedPublisher struct {
	mu      sync.Mutex
	sent    []sent
	release chan error
	started chan struct{}
}

type sent struct {
	key  string
	body []byte
	n    string
}

func (p *gatedPublisher) Send(key string, m *message.Message) (func() error, error) {
	p.mu.Lock()
	p.sent = append(p.sent, sent{key, m.Payload, m.Metadata.Get(HeaderCommands)})
	p.mu.Unlock()
	p.started <- struct{}{}
	return func() error { return <-p.release }, nil
}

func (p *gatedPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

func cmdBody(t *testing.T, inst string) []byte {
	t.Helper()
	b, err := command.Marshal(&command.Command{Version: command.Version, Kind: command.KindRelease, Scope: command.ScopeHost,
		Host: "h", InstanceUUID: inst, EventType: "instance.delete.end", Format: "versioned"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// While a message waits for its confirm, commands queue per routing key
// and leave together, in arrival order, each caller getting the outcome of
// the message that carried its command.
func TestBatcherGroupsWhileConfirmsPending(t *testing.T) {
	p := &gatedPublisher{release: make(chan error), started: make(chan struct{}, 100)}
	var sizes []int
	var smu sync.Mutex
	b := newBatcher(p, func(n int) { smu.Lock(); sizes = append(sizes, n); smu.Unlock() })
	ctx := context.Background()
	results := make(chan error, 100)
	confirmed := make(chan string, 100) // the ids whose confirmed hook ran
	hook := func(id string) func() { return func() { confirmed <- id } }
	go func() { results <- b.publish(ctx, "host.a", "first", cmdBody(t, "i-0"), hook("first")) }()
	<-p.started // the first command went out alone, at once
	// queue 5 for host.a and 3 for host.b, in order, while it waits
	for i := 1; i <= 5; i++ {
		id := fmt.Sprint("a", i)
		go func() { results <- b.publish(ctx, "host.a", id, cmdBody(t, fmt.Sprint("i-", i)), hook(id)) }()
		waitQueued(t, b, "host.a", i)
	}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprint("b", i)
		go func() { results <- b.publish(ctx, "host.b", id, cmdBody(t, fmt.Sprint("j-", i)), hook(id)) }()
		waitQueued(t, b, "host.b", i)
	}
	p.release <- nil                          // confirm the first
	<-p.started                               // the next round: both hosts' messages are sent
	<-p.started                               // before either confirm is awaited
	p.release <- nil                          // host.a's batch (it waited longest)
	p.release <- errors.New("channel closed") // host.b's batch fails
	var okN, failed int
	for range 9 {
		if err := <-results; err != nil {
			failed++
		} else {
			okN++
		}
	}
	if okN != 6 || failed != 3 {
		t.Errorf("%d callers got nil and %d an error; want 6 and 3 (host.b's three share its failure)", okN, failed)
	}
	waitIdle(t, b) // the hooks run after the callers are told, before the flush ends
	close(confirmed)
	var hooks []string
	for id := range confirmed {
		hooks = append(hooks, id)
	}
	if fmt.Sprint(hooks) != "[first a1 a2 a3 a4 a5]" { // once each, only for confirmed commands
		t.Errorf("confirmed hooks ran for %v, want [first a1 a2 a3 a4 a5]", hooks)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sent) != 3 || p.sent[0].key != "host.a" || p.sent[1].key != "host.a" || p.sent[2].key != "host.b" {
		t.Fatalf("published %+v", p.sent)
	}
	els, err := command.UnmarshalBatch(p.sent[1].body)
	if err != nil || len(els) != 5 || p.sent[1].n != "5" {
		t.Fatalf("host.a batch: %d commands (header %s), %v", len(els), p.sent[1].n, err)
	}
	for i, el := range els {
		if want := fmt.Sprint("i-", i+1); el.Command == nil || el.Command.InstanceUUID != want {
			t.Errorf("element %d = %+v, want %s (arrival order)", i, el.Command, want)
		}
	}
	smu.Lock()
	defer smu.Unlock()
	if fmt.Sprint(sizes) != "[1 5]" { // a failed message is not counted
		t.Errorf("observed batch sizes %v, want [1 5]", sizes)
	}
}

// A caller that gives up before its command was taken withdraws it: it is
// not published behind its back.
func TestBatcherWithdrawsAbandonedCommands(t *testing.T) {
	p := &gatedPublisher{release: make(chan error), started: make(chan struct{}, 10)}
	b := newBatcher(p, nil)
	first := make(chan error, 1)
	go func() { first <- b.publish(context.Background(), "host.a", "first", cmdBody(t, "i-0"), nil) }()
	<-p.started
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- b.publish(ctx, "host.a", "second", cmdBody(t, "i-1"), nil) }()
	waitQueued(t, b, "host.a", 1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned publish returned %v", err)
	}
	p.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a wrongly kept command would be published now
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sent) != 1 {
		t.Errorf("published %d messages, want 1 (the withdrawn command must not go out)", len(p.sent))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.keys) != 0 || len(b.pending) != 0 || b.running {
		t.Errorf("batcher not idle: keys %v, pending %d, running %v", b.keys, len(b.pending), b.running)
	}
}

// More than command.MaxBatch waiting commands for one host leave in
// several messages, none larger than the limit.
func TestBatcherSplitsAtMaxBatch(t *testing.T) {
	p := &gatedPublisher{release: make(chan error, 10), started: make(chan struct{}, 10)}
	b := newBatcher(p, nil)
	results := make(chan error, command.MaxBatch+11)
	go func() { results <- b.publish(context.Background(), "host.a", "first", cmdBody(t, "i-0"), nil) }()
	<-p.started
	body := cmdBody(t, "i-x")
	for i := range command.MaxBatch + 10 {
		go func() { results <- b.publish(context.Background(), "host.a", fmt.Sprint(i), body, nil) }()
	}
	waitQueued(t, b, "host.a", command.MaxBatch+10)
	p.release <- nil // the first; then 256, then the 10 left over
	<-p.started
	p.release <- nil
	<-p.started
	p.release <- nil
	for range command.MaxBatch + 11 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sent) != 3 || p.sent[1].n != fmt.Sprint(command.MaxBatch) || p.sent[2].n != "10" {
		t.Errorf("messages: %d, sizes %s and %s; want 3 with %d and 10", len(p.sent), p.sent[1].n, p.sent[2].n, command.MaxBatch)
	}
}

func waitQueued(t *testing.T, b *batcher, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		got := len(b.pending[key])
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commands queued for %s, want %d", got, key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A burst over many hosts goes out as one round: every host's message is
// sent before any confirm is awaited, so hosts do not queue behind each
// other's broker round trips.
func TestBatcherSendsEveryHostInOneRound(t *testing.T) {
	p := &gatedPublisher{release: make(chan error, 100), started: make(chan struct{}, 100)}
	b := newBatcher(p, nil)
	results := make(chan error, 51)
	go func() { results <- b.publish(context.Background(), "host.0", "first", cmdBody(t, "i-0"), nil) }()
	<-p.started
	for h := 1; h <= 50; h++ {
		go func() {
			results <- b.publish(context.Background(), fmt.Sprint("host.", h), fmt.Sprint(h), cmdBody(t, "i-x"), nil)
		}()
		waitQueued(t, b, fmt.Sprint("host.", h), 1)
	}
	p.release <- nil // confirm the first: the next round sends 50 messages
	for range 50 {
		select {
		case <-p.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 50 hosts' messages sent while the round waits for no confirm", p.count()-1)
		}
	}
	for range 50 {
		p.release <- nil
	}
	for range 51 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// waitIdle waits until no round is being sent or confirmed.
func waitIdle(t *testing.T, b *batcher) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		running := b.running
		b.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("batcher still flushing after 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
