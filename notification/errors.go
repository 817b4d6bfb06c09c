package notification

import (
	"errors"
	"fmt"
)

// Reason classifies why a message could not be decoded. Reasons are stable
// strings: they label the scour_notifications_poisoned_total metric and the
// x-scour-poison-reason header of messages in the poison queue.
type Reason string

const (
	ReasonTooLarge           Reason = "too_large"            // body over the decoder's MaxBytes
	ReasonInvalidUTF8        Reason = "invalid_utf8"         // body is not valid UTF-8
	ReasonNotJSON            Reason = "not_json"             // body (or oslo.message) is not JSON
	ReasonTruncated          Reason = "truncated"            // JSON ends early
	ReasonNotObject          Reason = "not_object"           // JSON, but not an object
	ReasonUnknownVersion     Reason = "unknown_oslo_version" // oslo.version is not "2.0"
	ReasonEnvelopeNotString  Reason = "envelope_message_not_string"
	ReasonMissingEventType   Reason = "missing_event_type"
	ReasonInvalidField       Reason = "invalid_field"         // a known field has the wrong JSON type
	ReasonBadTimestamp       Reason = "bad_timestamp"         // timestamp not in oslo's form
	ReasonBadPayload         Reason = "bad_payload"           // payload of a relevant event is not an object
	ReasonMissingInstance    Reason = "missing_instance_uuid" // relevant event without instance uuid
	ReasonMissingVolume      Reason = "missing_volume_id"     // volume event without its volume id(s)
	ReasonInvalidID          Reason = "invalid_id"            // instance or volume id is not a UUID
	ReasonInvalidCommand     Reason = "invalid_command"       // dispatch produced an invalid command
	ReasonUndeliverableRoute Reason = "unroutable"            // no host and broadcast not allowed
)

// ErrDecode is wrapped by every *DecodeError, so callers can test
// errors.Is(err, ErrDecode) to decide "poison, never retry".
var ErrDecode = errors.New("undecodable notification")

// DecodeError says why a message was rejected. It never carries the body:
// notification payloads hold tenant data and must not flood the logs.
type DecodeError struct {
	Reason    Reason
	EventType string // when known
	Detail    string
}

func (e *DecodeError) Error() string {
	s := fmt.Sprintf("undecodable notification (%s)", e.Reason)
	if e.EventType != "" {
		s += " event_type=" + e.EventType
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrDecode) true for every DecodeError.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// ReasonOf returns the classification of err, or "" when err is not a
// decode error.
func ReasonOf(err error) Reason {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return ""
}

func decodeErr(r Reason, eventType, format string, args ...any) *DecodeError {
	return &DecodeError{Reason: r, EventType: eventType, Detail: fmt.Sprintf(format, args...)}
}
