package images

import (
	"errors"
	"fmt"
)

// Reason classifies a refusal; it labels the refusal metric.
type Reason string

const (
	// ReasonHashMismatch: the bytes do not hash to what the source says.
	ReasonHashMismatch Reason = "hash_mismatch"
	// ReasonSizeMismatch: a different number of bytes than the source says.
	ReasonSizeMismatch Reason = "size_mismatch"
	// ReasonNotActive: the image is not active (deactivated, queued,
	// killed, deleted).
	ReasonNotActive Reason = "not_active"
	// ReasonNotFound: no image has that id, or no active image matches
	// the query.
	ReasonNotFound Reason = "not_found"
	// ReasonAmbiguous: the query matches several active images.
	ReasonAmbiguous Reason = "ambiguous"
	// ReasonNoMultihash: Glance holds no os_hash_algo/os_hash_value and
	// the legacy md5 checksum is not allowed (or absent too).
	ReasonNoMultihash Reason = "no_multihash"
	// ReasonUntrustedOwner: the image named by id belongs to a project
	// not in images.glance.owners.
	ReasonUntrustedOwner Reason = "untrusted_owner"
	// ReasonTooLarge: the image is larger than the cache may hold.
	ReasonTooLarge Reason = "too_large"
	// ReasonUnavailable: the source could not be read (unreachable, 5xx,
	// a stalled read) after bounded retries. Recoverable.
	ReasonUnavailable Reason = "unavailable"
	// ReasonInvalid: the reference itself is wrong (config).
	ReasonInvalid Reason = "invalid"
	// ReasonForbidden: Glance's policy refused scour's token (HTTP 403):
	// its role on its project is too small (docs/images.md, Keystone).
	ReasonForbidden Reason = "forbidden"
	// ReasonInsecure: Glance is reached over a connection that does not
	// protect the image and its hash (plain http, TLS without certificate
	// verification, a catalog from a plain-http Keystone) and
	// images.glance.allow_insecure_images is not set.
	ReasonInsecure Reason = "insecure"
)

// Error is a refused or unavailable image.
type Error struct {
	Ref    Ref
	Reason Reason
	// ImageID is the Glance image concerned, when one was found.
	ImageID string
	// Candidates are the images a query matched (ReasonAmbiguous) or
	// near misses worth naming, as "id (name, status)".
	Candidates []string
	// Msg says what happened and what the operator should do.
	Msg string
	Err error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("image %s: %s", e.Ref, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Recoverable reports whether trying again later may succeed without the
// operator changing anything (the source was unavailable).
func (e *Error) Recoverable() bool { return e.Reason == ReasonUnavailable }

// ReasonOf is err's Reason ("" when err is not an *Error).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}
