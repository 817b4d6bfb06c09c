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
	// ErrUnmanaged is what a Placement adapter wraps when a device has a
	// shape scour does not handle (not one inventory of total 1): the
	// device is skipped with a warning, never retried as a failure.
	ErrUnmanaged = errors.New("device shape not managed by scour")
	// ErrQuarantined is what a Placement adapter wraps when Unreserve
	// refused because the device carries the quarantine trait: an
	// operator retired it (or a quarantine was set) while its un-reserve
	// was pending. Only an operator's release ends that.
	ErrQuarantined = errors.New("device is quarantined")
	// ErrUnreservedElsewhere is what a Placement adapter wraps when
	// Unreserve found the device already un-reserved while no PUT of the
	// run could have landed (its own was refused, or none was sent):
	// someone else returned it to the pool while scour cleaned it (it was
	// schedulable during the wipe).
	ErrUnreservedElsewhere = errors.New("device was un-reserved by someone else during cleaning")
	// ErrStaleReturn is what a Placement adapter wraps when Unreserve
	// found that an earlier un-reserve PUT of the run may have landed
	// (scourd stopped before recording its answer) and the device has
	// changed since: it may have served a tenant while in the pool, so
	// the run's clean no longer counts. The device stays reserved and a
	// new run cleans it again.
	ErrStaleReturn = errors.New("device may have been in the pool since an earlier un-reserve of this run")
	// ErrRunClosed is what a Placement adapter wraps when Unreserve sent
	// nothing because the run's record was closed meanwhile (an operator
	// retired the device, or the start-up settle closed it): no PUT may
	// be sent for a closed run, and the device stays as it is.
	ErrRunClosed = errors.New("the cleaning run's record was closed before its un-reserve")
	// ErrGone is what a Placement adapter wraps when ReadDevice found no
	// such resource provider: the device left this host's tree.
	ErrGone = errors.New("device is not in this host's tree")
)

// Adapters wrap with ErrPermanent the errors retrying cannot fix (a
// Placement 4xx other than a generation conflict, for instance for a
// consumer id that is not a UUID), so that such a command is poisoned
// instead of requeued forever.
//
// IsPermanent reports whether err must not be retried: an invalid command
// (command.ErrInvalid) or anything wrapping ErrPermanent.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, command.ErrInvalid)
}
