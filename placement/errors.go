package placement

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrAllocated: Placement shows an allocation on the device; it is in
	// use and must not be cleaned or un-reserved. Not an operator problem:
	// wait for the next release of the device.
	ErrAllocated = errors.New("device has allocations in Placement")
	// ErrNotAllocated: Burn was asked for a device nobody holds.
	ErrNotAllocated = errors.New("device has no allocations in Placement")
	// ErrQuarantined: the device carries the quarantine trait; only an
	// operator's Unquarantine lets it return to the pool.
	ErrQuarantined = errors.New("device is quarantined")
	// ErrUnreservedElsewhere: the device was found already at reserved 0
	// while no un-reserve PUT of the run could have landed (this call's
	// was refused with a generation conflict, or the run's PutJournal
	// holds none): someone else un-reserved it while scour cleaned it, so
	// it was schedulable during the wipe. The device is in the pool, but
	// not by scour's doing.
	ErrUnreservedElsewhere = errors.New("device was un-reserved by someone else during cleaning")
	// ErrStaleReturn: an earlier un-reserve PUT of the run may have
	// landed (its answer was lost, or scourd stopped before recording
	// it), and the device has changed since beyond what that PUT did
	// (PutJournal): it may have served a tenant while in the pool, so the
	// clean that run did no longer counts. It stays reserved and must be
	// cleaned again.
	ErrStaleReturn = errors.New("device may have been in the pool since an earlier un-reserve of this run")
	// ErrNotFound: the resource provider (device or compute node) does not
	// exist in Placement.
	ErrNotFound = errors.New("resource provider not found in Placement")
	// ErrUnmanaged: the device's shape is not one scour handles (not exactly
	// one inventory with total 1).
	ErrUnmanaged = errors.New("device shape not managed by scour")
	// ErrMicroversion: Placement is too old (or no longer serves the
	// microversion negotiated at start).
	ErrMicroversion = errors.New("placement microversion not supported")
	// ErrCredentials: Keystone refused scour's credentials when its token
	// expired, or Placement refused the token Keystone issued. Recoverable
	// for the caller (it tries again later, maybe after the operator's
	// fix) but never retried at once: each retry is another password
	// attempt, and Keystone's lockout_failure_attempts counts them.
	ErrCredentials = errors.New("Keystone rejected scour's credentials: check OS_PASSWORD / the application credential (scourd's environment or clouds.yaml)")
	// ErrForbidden: Placement's policy denied the request (HTTP 403).
	// Recoverable for the caller, not retried at once: the same token gets
	// the same answer.
	ErrForbidden = errors.New("Placement policy denied the request: give scour's Keystone user the role docs/operations.md names (Keystone role and Placement policy), or admin")
)

// errNoUUID: a Ref without the RP UUID (a caller bug).
var errNoUUID = errors.New("device reference has no resource provider UUID")

// checkRef rejects a Ref that cannot name an RP.
func checkRef(dev Ref) error {
	if dev.UUID == "" || strings.ContainsAny(dev.UUID, "/?#") {
		return errNoUUID
	}
	return nil
}

// RecoverableError is a transient failure: Placement unreachable, 5xx,
// timeout, or generation conflicts that outlasted the retry budget. The
// caller retries later; it must not treat the device as failed.
type RecoverableError struct{ Err error }

func (e *RecoverableError) Error() string { return e.Err.Error() }
func (e *RecoverableError) Unwrap() error { return e.Err }

// IsRecoverable reports whether err (or anything it wraps) is transient.
func IsRecoverable(err error) bool {
	var r *RecoverableError
	return errors.As(err, &r)
}

// APIError is a Placement error response that is not transient.
type APIError struct {
	Status int
	Code   string // Placement error code ("placement.concurrent_update"), from 1.23
	Detail string
	Method string
	URL    string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("placement %s %s: HTTP %d", e.Method, e.URL, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// DeviceError names the device an operation failed on and what the
// operator should do about it.
type DeviceError struct {
	Op     string // "unreserve", "burn", "quarantine", ...
	Dev    Ref
	Err    error
	Action string // operator advice; empty when none is needed
}

func (e *DeviceError) Error() string {
	s := fmt.Sprintf("placement %s of device %s: %v", e.Op, e.Dev, e.Err)
	if e.Action != "" {
		s += " (" + e.Action + ")"
	}
	return s
}

func (e *DeviceError) Unwrap() error { return e.Err }

func devErr(op string, dev Ref, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errNoUUID) {
		return &DeviceError{Op: op, Dev: dev, Err: err}
	}
	de := &DeviceError{Op: op, Dev: dev, Err: err}
	switch {
	case errors.Is(err, ErrAllocated):
		de.Action = "device is in use; it will be handled when the instance releases it"
	case errors.Is(err, ErrQuarantined):
		de.Action = "run `scourctl unquarantine` only after checking the device"
	case errors.Is(err, ErrUnreservedElsewhere):
		de.Action = "check for another cleaner of this host's devices, e.g. Nova's clean-on-delete sample"
	case errors.Is(err, ErrStaleReturn):
		de.Action = "the device stays reserved and is cleaned again by a new run"
	case errors.Is(err, ErrNotFound):
		de.Action = "check the compute node's [pci] device_spec and Placement tree"
	case errors.Is(err, ErrUnmanaged):
		de.Action = "scour handles only single-inventory devices with total 1"
	case errors.Is(err, ErrCredentials), errors.Is(err, ErrForbidden):
		de.Action = "scour tries again on its next scan; nothing is lost meanwhile"
	case IsRecoverable(err):
		de.Action = "transient; scour retries later, check Placement's health if it persists"
	}
	// Keep recoverability visible at the top level.
	if IsRecoverable(err) {
		return &RecoverableError{Err: de}
	}
	return de
}
