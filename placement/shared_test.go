package placement

import (
	"context"
	"runtime"
	"sync"
	"testing"
)

// Callers that ask while a listing runs share the next one, which begins
// only after all of them asked: one call for the whole group, and never a
// listing older than a caller's request.
func TestSharedListingGroupsCallersThatAskedMeanwhile(t *testing.T) {
	t.Parallel()
	var s sharedListing
	var mu sync.Mutex
	var asked []int // callers that asked before each listing began
	n := 0          // callers that asked so far
	first, release := make(chan struct{}), make(chan struct{})
	list := func(context.Context) (eligible, error) {
		mu.Lock()
		asked = append(asked, n)
		round := len(asked)
		mu.Unlock()
		if round == 1 {
			close(first)
			<-release
		}
		return eligible{"rp": round}, nil
	}
	ask := func(got chan<- int) {
		mu.Lock()
		n++
		mu.Unlock()
		e, err := s.next(context.Background(), list)
		if err != nil {
			t.Error(err)
		}
		got <- e["rp"]
	}
	got := make(chan int, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ask(got) }()
	<-first // listing 1 runs for caller 1
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); ask(got) }()
	}
	waitPending(&s, 3)
	close(release)
	wg.Wait()
	close(got)
	rounds := map[int]int{}
	for r := range got {
		rounds[r]++
	}
	if rounds[1] != 1 || rounds[2] != 3 {
		t.Errorf("callers per listing = %v, want caller 1 on listing 1 and the other 3 sharing listing 2", rounds)
	}
	if len(asked) != 2 || asked[1] != 4 {
		t.Errorf("callers asked before each listing began = %v, want [1 4]", asked)
	}
}

// waitPending waits until n callers joined the listing not begun yet.
func waitPending(s *sharedListing, n int) {
	for {
		s.mu.Lock()
		ok := s.pending != nil && s.pending.callers == n
		s.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}
