package testkit

import (
	"context"
	"sync"
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
