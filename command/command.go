// Package command defines the small, versioned message that scour's
// dispatcher publishes to a host's queue (routing key host.<host>) or as an
// instance-scoped broadcast, and that the per-host intake hands to handlers.
//
// A command is a trigger, never a source of device identity (safety rule 3):
// it names an instance and what happened to it. Which devices are affected is
// always read from this host's Placement tree and local hardware discovery.
package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Version is the schema version of Command written by this binary. A
// consumer rejects (poisons) a command whose version it does not know.
const Version = 1

// Kind says what a handler does with a command.
type Kind string

const (
	// KindClaim: the instance now holds devices on the target host
	// (create, unshelve, resize_finish on dest, live_migration_post_dest,
	// rebuild). Record claims, burn what Nova left unburned.
	KindClaim Kind = "claim"
	// KindRelease: the instance is gone (delete.end). Release its claims,
	// then reconcile the host.
	KindRelease Kind = "release"
	// KindShelveOffload: the instance left the host but keeps existing;
	// release its devices and keep the claim dormant for the unshelve.
	KindShelveOffload Kind = "shelve-offload"
	// KindMoveSource: a move finished and the source host releases the
	// instance's claims (resize_confirm.end, a broadcast since a
	// cross-cell confirm comes from nova-conductor;
	// live_migration_post.end, host-scoped).
	KindMoveSource Kind = "move-source"
	// KindRevert: resize_revert.end, broadcast. The host holding a claim for
	// the instance that no allocation backs any more releases it.
	KindRevert Kind = "revert"
	// KindVolume: volume attach/detach/swap; update the claim's volumes.
	KindVolume Kind = "volume"
	// KindReconcile: scan the host (evacuate, operator request).
	KindReconcile Kind = "reconcile"
)

// Kinds lists every kind, for metrics and validation.
var Kinds = []Kind{KindClaim, KindRelease, KindShelveOffload, KindMoveSource, KindRevert, KindVolume, KindReconcile}

// Scope says who receives a command.
type Scope string

const (
	ScopeHost      Scope = "host"      // routing key host.<Host>
	ScopeBroadcast Scope = "broadcast" // every host; instance-scoped
)

// VolumeChange describes a volume event. IsRoot is true when the volume is
// (or was) the instance's boot volume (boot_index 0).
type VolumeChange struct {
	Action      string `json:"action"` // attach | detach | swap
	VolumeID    string `json:"volume_id,omitempty"`
	OldVolumeID string `json:"old_volume_id,omitempty"`
	NewVolumeID string `json:"new_volume_id,omitempty"`
	IsRoot      bool   `json:"is_root,omitempty"`
}

// Command is what travels on scour's own exchange.
type Command struct {
	Version      int           `json:"version"`
	Kind         Kind          `json:"kind"`
	Scope        Scope         `json:"scope"`
	Host         string        `json:"host,omitempty"` // target host; empty for broadcasts
	Node         string        `json:"node,omitempty"` // payload node, a hint only
	InstanceUUID string        `json:"instance_uuid,omitempty"`
	ProjectID    string        `json:"project_id,omitempty"`
	UserID       string        `json:"user_id,omitempty"`
	State        string        `json:"state,omitempty"`
	EventType    string        `json:"event_type"`
	Format       string        `json:"format"` // versioned | legacy | scour
	MessageID    string        `json:"message_id,omitempty"`
	RequestID    string        `json:"request_id,omitempty"`
	Timestamp    time.Time     `json:"timestamp"`
	Volumes      []string      `json:"volumes,omitempty"` // volume ids from block_devices when present
	Volume       *VolumeChange `json:"volume,omitempty"`
}

// ErrInvalid marks a command that can never be processed (poison it).
var ErrInvalid = errors.New("invalid command")

// Validate reports every problem with c, wrapped in ErrInvalid.
func (c *Command) Validate() error {
	var errs []error
	if c.Version != Version {
		errs = append(errs, fmt.Errorf("unsupported command version %d (this binary knows %d)", c.Version, Version))
	}
	known := false
	for _, k := range Kinds {
		known = known || k == c.Kind
	}
	if !known {
		errs = append(errs, fmt.Errorf("unknown kind %q", c.Kind))
	}
	switch c.Scope {
	case ScopeHost:
		if c.Host == "" {
			errs = append(errs, errors.New("host-scoped command without host"))
		}
	case ScopeBroadcast:
	default:
		errs = append(errs, fmt.Errorf("unknown scope %q", c.Scope))
	}
	if c.Kind != KindReconcile && c.InstanceUUID == "" {
		errs = append(errs, fmt.Errorf("%s command without instance_uuid", c.Kind))
	}
	if c.InstanceUUID != "" && !IsUUID(c.InstanceUUID) {
		errs = append(errs, fmt.Errorf("instance_uuid %.40q is not a UUID", c.InstanceUUID))
	}
	ids := c.Volumes
	if v := c.Volume; v != nil {
		ids = append([]string{v.VolumeID, v.OldVolumeID, v.NewVolumeID}, ids...)
	}
	for _, id := range ids {
		if id != "" && !IsUUID(id) {
			errs = append(errs, fmt.Errorf("volume id %.40q is not a UUID", id))
		}
	}
	if c.Kind == KindVolume && c.Volume == nil {
		errs = append(errs, errors.New("volume command without volume change"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// MaxBytes bounds a command message body (a command is a few hundred
// bytes; an array of the rolling-upgrade form at most MaxArray of them).
const MaxBytes = 1 << 20

// MaxArray is the most commands an array-form message may carry.
const MaxArray = 256

// Marshal encodes c as one message body: one command per message.
func Marshal(c *Command) ([]byte, error) { return json.Marshal(c) }

// Element is one command of a message: Raw is its JSON text, and either
// Command is set or Err (wrapping ErrInvalid) says why it cannot be used.
type Element struct {
	Raw     json.RawMessage
	Command *Command
	Err     error
}

// Decode decodes a message body from scour's exchange. The current form is
// one command object. For the rolling upgrade from releases that batched
// commands (scourd before issue 18 sent a JSON array of up to 256 commands
// for one host in one message), a non-empty array is also accepted and
// yields one element per command, each decoded and validated on its own.
// The array form is accepted by this release only: the next release
// (scour 0.3) removes it, once no older dispatcher can still be running.
// err (wrapping ErrInvalid) is set when the body as a whole is neither form.
func Decode(b []byte) ([]Element, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalid, len(b), MaxBytes)
	}
	body := bytes.TrimLeft(b, " \t\r\n")
	if len(body) == 0 || body[0] != '[' {
		c, err := Unmarshal(b)
		return []Element{{Raw: b, Command: c, Err: err}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, fmt.Errorf("%w: not a JSON array of commands: %w", ErrInvalid, err)
	}
	if len(raws) == 0 || len(raws) > MaxArray {
		return nil, fmt.Errorf("%w: an array holds 1 to %d commands, this one %d", ErrInvalid, MaxArray, len(raws))
	}
	out := make([]Element, len(raws))
	for i, raw := range raws {
		out[i].Raw = raw
		out[i].Command, out[i].Err = Unmarshal(raw)
	}
	return out, nil
}

// Unmarshal decodes and validates a command.
func Unmarshal(b []byte) (*Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: not a JSON command: %w", ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// IsUUID reports whether s is a UUID in its canonical 36-character form
// (8-4-4-4-12 hexadecimal digits), as Nova and Cinder write ids.
func IsUUID(s string) bool { return len(s) == 36 && uuid.Validate(s) == nil }
