package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/notification"
)

// CommandHandler acts on a command addressed to this host (or broadcast).
//
// Ack discipline: the command's message is acked only after Handle returned
// nil. An error wrapping command.ErrInvalid or marked with Permanent, or a
// panic, sends the message to the poison queue (never retried); any other
// error is retried in-process with backoff (bus.retry), then the message is
// nacked and requeued.
// Handle may therefore see a command again after a crash or a lost ack:
// handlers must be idempotent.
type CommandHandler interface {
	Handle(ctx context.Context, c *command.Command) error
}

// HandlerFunc adapts a function to CommandHandler.
type HandlerFunc func(ctx context.Context, c *command.Command) error

func (f HandlerFunc) Handle(ctx context.Context, c *command.Command) error { return f(ctx, c) }

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix: the message goes to
// the poison queue.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err must not be retried: it goes to the
// poison queue.
func IsPermanent(err error) bool {
	var p permanentError
	var pe *poisonError
	return errors.As(err, &p) || errors.As(err, &pe) || errors.Is(err, command.ErrInvalid) || errors.Is(err, notification.ErrDecode)
}

// Recorder is the default CommandHandler until the real handlers are
// plugged in: it logs each command and keeps the latest ones in memory.
type Recorder struct {
	Log *slog.Logger
	Max int // commands kept; 0 = 1000

	mu       sync.Mutex
	commands []command.Command
}

var _ CommandHandler = (*Recorder)(nil)

// Handle logs and records c.
func (r *Recorder) Handle(ctx context.Context, c *command.Command) error {
	if r.Log != nil {
		r.Log.InfoContext(ctx, "command received", "kind", c.Kind, "scope", c.Scope, "instance", c.InstanceUUID,
			"target", c.Host, "event", c.EventType, "request_id", c.RequestID, "message_id", c.MessageID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	max := r.Max
	if max <= 0 {
		max = 1000
	}
	if len(r.commands) >= max {
		r.commands = r.commands[1:]
	}
	r.commands = append(r.commands, *c)
	return nil
}

// Commands returns a copy of the recorded commands, oldest first.
func (r *Recorder) Commands() []command.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]command.Command(nil), r.commands...)
}
