package handlers

import (
	"errors"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/placement"
)

var (
	// ErrPermanent marks an error that retrying cannot fix: the intake
	// sends the command to the poison queue. Every other error from
	// Handle is transient (Placement, the claims store or the broker was
	// unavailable): the intake retries with backoff, then requeues.
	ErrPermanent = errors.New("permanent")
)

// IsPermanent reports whether err must not be retried, so that such a
// command is poisoned instead of requeued forever: an invalid command
// (command.ErrInvalid), anything wrapping ErrPermanent, or an error the
// Placement gate classifies permanent (placement.IsPermanent: a 4xx
// other than a generation conflict).
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, command.ErrInvalid) || placement.IsPermanent(err)
}
