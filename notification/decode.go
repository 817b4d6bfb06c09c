package notification

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultMaxBytes bounds a message body. Nova's largest instance payloads
// are a few tens of KiB; a megabyte leaves room for big flavors/metadata.
const DefaultMaxBytes = 1 << 20

// OsloTimeLayout is oslo's notification timestamp form (UTC, no zone).
const OsloTimeLayout = "2006-01-02 15:04:05.999999"

// Decoder decodes notification bodies. The zero value uses DefaultMaxBytes.
type Decoder struct {
	MaxBytes int
}

// Decode decodes body with the default limits.
func Decode(body []byte) (*Event, error) { return Decoder{}.Decode(body) }

// wire is the outer body: either the oslo v2.0 envelope or, for the older
// un-enveloped form, the message itself.
type wire struct {
	Version json.RawMessage `json:"oslo.version"`
	Message json.RawMessage `json:"oslo.message"`
	message
}

// message is the inner oslo message.
type message struct {
	EventType   *string         `json:"event_type"`
	PublisherID string          `json:"publisher_id"`
	Priority    string          `json:"priority"`
	MessageID   string          `json:"message_id"`
	Timestamp   string          `json:"timestamp"`
	RequestID   string          `json:"_context_request_id"`
	Payload     json.RawMessage `json:"payload"`
}

// Decode turns an AMQP body into an Event, with encoding/json, and
// validates it once: size, UTF-8, the envelope version, the JSON types of
// the fields scour reads, and for relevant events the ids the command
// carries (instance and volume ids must be UUIDs). Payloads of ignored
// event types are not parsed (they are the bulk of the traffic).
func (d Decoder) Decode(body []byte) (*Event, error) {
	maxBytes := d.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if len(body) > maxBytes {
		return nil, decodeErr(ReasonTooLarge, "", "%d bytes, limit %d", len(body), maxBytes)
	}
	if !utf8.Valid(body) {
		return nil, decodeErr(ReasonInvalidUTF8, "", "body is not valid UTF-8")
	}
	var w wire
	if err := unmarshal(body, &w, "body"); err != nil {
		return nil, err
	}
	ev := &Event{Envelope: EnvelopeNone}
	msg := w.message
	if w.Version != nil || w.Message != nil {
		ev.Envelope = EnvelopeOslo2
		inner, err := unwrap(w.Version, w.Message)
		if err != nil {
			return nil, err
		}
		msg = message{}
		if err := unmarshal(inner, &msg, "oslo.message"); err != nil {
			return nil, err
		}
	}
	if msg.EventType == nil || *msg.EventType == "" {
		return nil, decodeErr(ReasonMissingEventType, "", "message has no event_type")
	}
	if err := fillHeader(ev, &msg); err != nil {
		return nil, err
	}
	ev.Format = formatOf(msg.Payload)
	sp, ok := eventTypes[ev.EventType]
	if !ok {
		return ev, nil
	}
	ev.Kind = sp.kind
	if err := fillPayload(ev, msg.Payload, sp); err != nil {
		return nil, err
	}
	return ev, nil
}

// unwrap checks the envelope and returns the inner JSON text.
func unwrap(version, msg json.RawMessage) ([]byte, error) {
	var v string
	if version == nil || json.Unmarshal(version, &v) != nil || v != "2.0" {
		return nil, decodeErr(ReasonUnknownVersion, "", "oslo.version %s, this decoder knows \"2.0\"", clip(version))
	}
	if len(msg) == 0 || msg[0] != '"' {
		return nil, decodeErr(ReasonEnvelopeNotString, "", "oslo.message must be a JSON string, got %s", clip(msg))
	}
	var s string
	if err := json.Unmarshal(msg, &s); err != nil {
		return nil, decodeErr(ReasonEnvelopeNotString, "", "oslo.message: %v", err)
	}
	return []byte(s), nil
}

func fillHeader(ev *Event, m *message) error {
	ev.EventType = *m.EventType
	ev.Priority = m.Priority
	ev.MessageID = m.MessageID
	ev.RequestID = m.RequestID
	ev.PublisherService, ev.PublisherHost = splitPublisher(m.PublisherID)
	if m.Timestamp != "" {
		ts, err := parseTime(m.Timestamp)
		if err != nil {
			return decodeErr(ReasonBadTimestamp, ev.EventType, "timestamp %q is not in oslo's form %q", clip([]byte(m.Timestamp)), OsloTimeLayout)
		}
		ev.Timestamp = ts
	}
	return nil
}

// parseTime accepts oslo's "2026-11-22 02:59:51.390927" (UTC) and, for
// hand-written messages, RFC 3339.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(OsloTimeLayout, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UTC(), err
}

// splitPublisher splits "nova-compute:cmp1" or legacy "compute.cmp1.example".
func splitPublisher(p string) (service, host string) {
	if i := strings.IndexByte(p, ':'); i >= 0 {
		return p[:i], p[i+1:]
	}
	if i := strings.IndexByte(p, '.'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return p, ""
}

// formatOf says a payload is versioned when it holds "nova_object.data".
func formatOf(payload json.RawMessage) Format {
	if bytes.Contains(payload, []byte(`"nova_object.data"`)) {
		return FormatVersioned
	}
	return FormatLegacy
}

// unmarshal decodes JSON text into v and classifies the failure.
func unmarshal(data []byte, v any, what string) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &se) && strings.Contains(se.Error(), "unexpected end")):
		return decodeErr(ReasonTruncated, "", "%s: %v", what, err)
	case errors.As(err, &se):
		return decodeErr(ReasonNotJSON, "", "%s: %v", what, err)
	case errors.As(err, &te) && te.Field == "":
		return decodeErr(ReasonNotObject, "", "%s is a JSON %s, not an object", what, te.Value)
	case errors.As(err, &te):
		return decodeErr(ReasonInvalidField, "", "%s: field %s is a JSON %s", what, te.Field, te.Value)
	default:
		return decodeErr(ReasonNotJSON, "", "%s: %v", what, err)
	}
}

// clip shortens raw input quoted in an error (never whole payloads).
func clip(b []byte) string {
	const max = 40
	if b == nil {
		return "(absent)"
	}
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
