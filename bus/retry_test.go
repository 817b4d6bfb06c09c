package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// withRetry tries once without go-retry, then hands over to it: the number
// of calls and the returned error must be those of a plain retry.Do loop.
func TestWithRetryAttempts(t *testing.T) {
	transient := errors.New("broker unavailable")
	permanent := Permanent(errors.New("bad command"))
	for _, tc := range []struct {
		name      string
		attempts  int
		results   []error // what fn returns on each call; the last repeats
		wantCalls int
		wantErr   error
	}{
		{"success at once", 3, []error{nil}, 1, nil},
		{"permanent at once: never retried", 3, []error{permanent}, 1, permanent},
		{"transient then success", 3, []error{transient, nil}, 2, nil},
		{"transient then permanent", 3, []error{transient, permanent}, 2, permanent},
		{"transient every time: all attempts, last error", 3, []error{transient}, 3, transient},
		{"one attempt: no retry", 1, []error{transient}, 1, transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bus{cfg: Config{Retry: RetryConfig{Attempts: tc.attempts, Initial: time.Millisecond, Max: 2 * time.Millisecond}}}
			calls := 0
			err := b.withRetry(context.Background(), func(context.Context) error {
				calls++
				return tc.results[min(calls, len(tc.results))-1]
			})
			if calls != tc.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tc.wantCalls)
			}
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestWithRetryStopsWithContext(t *testing.T) {
	b := &Bus{cfg: Config{Retry: RetryConfig{Attempts: 5, Initial: time.Hour, Max: time.Hour}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := b.withRetry(ctx, func(context.Context) error {
		calls++
		cancel() // the backoff wait must end with the context, not after an hour
		return errors.New("broker unavailable")
	})
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("calls %d, err %v: want 1 call and context.Canceled", calls, err)
	}
	calls = 0
	if err := b.withRetry(ctx, func(context.Context) error { calls++; return nil }); calls != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before the first try: calls %d, err %v; want no call and context.Canceled", calls, err)
	}
}
