// Package notification turns the body of a Nova notification, as oslo.messaging
// puts it on RabbitMQ, into a typed Event, and an Event into a scour command.
//
// Both functions are pure (no I/O, no clock), so they are unit-tested over
// Nova's own samples and benchmarked in-process:
//
//	body ──Decode──▶ *Event ──Dispatch──▶ *command.Command (or nil: ignored)
//
// Decode accepts the oslo.messaging v2.0 envelope ({"oslo.version": "2.0",
// "oslo.message": "<JSON string>"}) and the older un-enveloped body, and the
// payload in both of Nova's notification formats: versioned
// (payload["nova_object.data"]) and legacy (flat compute.instance.* payloads).
// Every rejection is a *DecodeError with a stable Reason.
package notification

import (
	"time"

	"github.com/scour-project/scour/command"
)

// Format is Nova's notification format.
type Format string

const (
	FormatVersioned Format = "versioned" // [notifications] notification_format=versioned
	FormatLegacy    Format = "legacy"    // the default "unversioned" format
)

// Envelope says how the message was wrapped on the wire.
type Envelope string

const (
	EnvelopeOslo2 Envelope = "oslo2" // {"oslo.version": "2.0", "oslo.message": "..."}
	EnvelopeNone  Envelope = "none"  // the inner message sent as the body
)

// BlockDevice is one entry of a versioned payload's block_devices (present
// only with [notifications] bdms_in_notifications = True).
type BlockDevice struct {
	VolumeID   string
	DeviceName string
	BootIndex  *int // nil: not bootable; 0: the root volume
}

// IsRoot reports whether the device is the instance's boot volume.
func (b BlockDevice) IsRoot() bool { return b.BootIndex != nil && *b.BootIndex == 0 }

// Event is a decoded notification. Fields the message did not carry are
// zero. Kind is empty for events scour ignores (they are acked and counted).
type Event struct {
	EventType string
	Kind      command.Kind // "" = ignored
	Format    Format
	Envelope  Envelope
	Priority  string

	MessageID string
	RequestID string    // _context_request_id, else payload request_id
	Timestamp time.Time // UTC; zero when the message had none

	// PublisherService and PublisherHost split publisher_id:
	// "nova-compute:cmp1" (versioned) or "compute.cmp1" (legacy).
	PublisherService string
	PublisherHost    string

	InstanceUUID string
	Host         string // payload host; "" when null (e.g. after shelve_offload)
	Node         string
	State        string
	ProjectID    string
	UserID       string

	BlockDevices []BlockDevice
	VolumeID     string // volume_attach/detach
	OldVolumeID  string // volume_swap
	NewVolumeID  string
}

// Relevant reports whether scour acts on the event.
func (e *Event) Relevant() bool { return e.Kind != "" }

// VolumeIDs returns the volume ids of the instance's block devices.
func (e *Event) VolumeIDs() []string {
	var ids []string
	for _, b := range e.BlockDevices {
		if b.VolumeID != "" {
			ids = append(ids, b.VolumeID)
		}
	}
	return ids
}
