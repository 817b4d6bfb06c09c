package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

type handleFunc func(ctx context.Context, c *command.Command) error

func (f handleFunc) Handle(ctx context.Context, c *command.Command) error { return f(ctx, c) }

// The bus poisons what handlers call permanent (an invalid command,
// ErrPermanent, a Placement refusal retrying cannot fix) and retries the
// rest: a transient failure, or a Placement refusal that a later scan
// resolves, is never poisoned; success stays success.
func TestIntakeMarksPermanentErrorsForTheBus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"ok", nil, false},
		{"transient", errors.New("claims store unavailable"), false},
		{"invalid command", fmt.Errorf("instance: %w", command.ErrInvalid), true},
		{"handlers permanent", fmt.Errorf("device 0000:81:00.0: %w", handlers.ErrPermanent), true},
		{"placement 400", &placement.APIError{Status: 400}, true},
		{"placement conflict", &placement.APIError{Status: 409}, false},
		{"placement allocated", placement.ErrAllocated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := handlers.Intake(handleFunc(func(context.Context, *command.Command) error { return tc.err }))
			err := in.Handle(context.Background(), &command.Command{})
			if !errors.Is(err, tc.err) {
				t.Fatalf("Handle's error %v became %v", tc.err, err)
			}
			if got := bus.IsPermanent(err); got != tc.permanent {
				t.Fatalf("%v: bus.IsPermanent = %v, want %v", err, got, tc.permanent)
			}
		})
	}
}
