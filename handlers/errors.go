package handlers

import (
	"errors"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/placement"
)

var (
	// ErrPermanent marks an error that retrying cannot fix: the intake
	// sends the command to the poison queue. Every other error from
	// Handle is transient (Placement, the claims store or the broker was
	// unavailable): the intake retries with backoff, then requeues.
	ErrPermanent = errors.New("permanent")
	// The gate's refusals are Placement's own errors (placement/errors.go)
	// and the claims store's (a closed run's journal), under the names the
	// handlers act on.
	ErrAllocated           = placement.ErrAllocated
	ErrNotAllocated        = placement.ErrNotAllocated
	ErrUnmanaged           = placement.ErrUnmanaged
	ErrQuarantined         = placement.ErrQuarantined
	ErrUnreservedElsewhere = placement.ErrUnreservedElsewhere
	ErrStaleReturn         = placement.ErrStaleReturn
	ErrRunClosed           = claims.ErrNotCleaned
	// ErrGone is what a Placement adapter wraps when ReadDevice found no
	// such resource provider: the device left this host's tree.
	ErrGone = errors.New("device is not in this host's tree")
)

// IsPermanent reports whether err must not be retried, so that such a
// command is poisoned instead of requeued forever: an invalid command
// (command.ErrInvalid), anything wrapping ErrPermanent, or an error the
// Placement gate classifies permanent (placement.IsPermanent: a 4xx
// other than a generation conflict).
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, command.ErrInvalid) || placement.IsPermanent(err)
}
