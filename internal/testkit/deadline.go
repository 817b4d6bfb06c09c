package testkit

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// Deadline is a context whose deadline passes when the test calls Expire,
// not when a wall clock says: a test of "the deadline ends it mid-way"
// expires it at the point it means (after the third progress step, once
// a child process is running) instead of racing a short timeout against
// work a loaded machine may do slowly. After Expire, Err is
// context.DeadlineExceeded, as for a deadline that passed.
type Deadline struct {
	context.Context
	once sync.Once
	done chan struct{}
}

// NewDeadline returns a Deadline derived from parent (its values; its
// cancellation is not followed).
func NewDeadline(parent context.Context) *Deadline {
	return &Deadline{Context: context.WithoutCancel(parent), done: make(chan struct{})}
}

// Expire makes the deadline pass now; calling it again does nothing.
func (d *Deadline) Expire() { d.once.Do(func() { close(d.done) }) }

// Done is closed by Expire.
func (d *Deadline) Done() <-chan struct{} { return d.done }

// Err is context.DeadlineExceeded after Expire, else nil.
func (d *Deadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// ExpireOnFile expires d once path exists (what the work under test
// writes when it has reached the point the deadline should pass at) and
// returns the file's contents. It fails t when ended (the work's result)
// delivers first, or when path has not appeared within a minute.
func (d *Deadline) ExpireOnFile(t testing.TB, path string, ended <-chan error) []byte {
	t.Helper()
	for give := time.Now().Add(time.Minute); ; {
		b, err := os.ReadFile(path)
		if err == nil {
			d.Expire()
			return b
		}
		if time.Now().After(give) {
			t.Fatalf("%s did not appear within a minute: %v", path, err)
		}
		select {
		case err := <-ended:
			t.Fatalf("ended before writing %s: %v", path, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
