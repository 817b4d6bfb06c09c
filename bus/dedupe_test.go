package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRecentRunsEachKeyOnce(t *testing.T) {
	t.Parallel()
	r := newRecent(2)
	ctx := context.Background()
	// A failed attempt lets the next delivery handle the key.
	if owned, _ := r.begin(ctx, "a"); !owned {
		t.Fatal("first delivery must handle")
	}
	r.end("a", false)
	if owned, _ := r.begin(ctx, "a"); !owned {
		t.Fatal("after a failure the redelivery must handle")
	}
	r.end("a", true)
	if owned, _ := r.begin(ctx, "a"); owned {
		t.Fatal("after a success the redelivery is a duplicate")
	}
	// Concurrent deliveries of one key: exactly one handles; the others
	// wait for its outcome.
	var handled atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owned, err := r.begin(ctx, "b")
			if err != nil || !owned {
				return
			}
			handled.Add(1)
			time.Sleep(20 * time.Millisecond)
			r.end("b", true)
		}()
	}
	wg.Wait()
	if handled.Load() != 1 {
		t.Errorf("key handled %d times", handled.Load())
	}
	// The ring forgets the oldest successes.
	for _, k := range []string{"c", "d"} {
		r.begin(ctx, k)
		r.end(k, true)
	}
	if owned, _ := r.begin(ctx, "a"); !owned {
		t.Error("evicted key should be handled again")
	}
	// A waiter gives up with its context.
	r2 := newRecent(2)
	r2.begin(ctx, "x")
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := r2.begin(cctx, "x"); err == nil {
		t.Error("waiter ignored its context")
	}
}
