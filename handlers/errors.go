package handlers

import (
	"errors"

	"github.com/scour-project/scour/command"
)

var (
	// ErrPermanent marks an error that retrying cannot fix: the intake
	// sends the command to the poison queue. Every other error from
	// Handle is transient (Placement, the claims store or the broker was
	// unavailable): the intake retries with backoff, then requeues.
	ErrPermanent = errors.New("permanent")
	// ErrAllocated is what a Placement adapter wraps when Unreserve (or
	// anything else) refused because the device is allocated.
	ErrAllocated = errors.New("device is allocated")
	// ErrNotAllocated is what a Placement adapter wraps when Burn found
	// nobody holding the device: the instance left meanwhile, and the
	// reconciler owns the device now.
	ErrNotAllocated = errors.New("device is not allocated")
)

// IsPermanent reports whether err must not be retried: an invalid command
// (command.ErrInvalid) or anything wrapping ErrPermanent.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, command.ErrInvalid)
}
