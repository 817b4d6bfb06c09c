package handlers

import (
	"context"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/command"
)

// CommandHandler is what Intake gives the bus: the Handler's Handle.
type CommandHandler interface {
	Handle(ctx context.Context, c *command.Command) error
}

// Intake is h as the bus's per-host command handler: an error IsPermanent
// calls permanent is marked bus.Permanent, so the bus sends the command
// to the poison queue instead of retrying it forever; any other error is
// the bus's to retry with backoff, then requeue.
func Intake(h CommandHandler) bus.CommandHandler {
	return bus.HandlerFunc(func(ctx context.Context, c *command.Command) error {
		err := h.Handle(ctx, c)
		if IsPermanent(err) {
			return bus.Permanent(err)
		}
		return err
	})
}
