package notification

import (
	"bytes"
	"encoding/json"

	"github.com/scour-project/scour/command"
)

// instanceFields are the payload fields scour reads. Versioned payloads
// carry them under "nova_object.data" (uuid); legacy payloads carry them
// flat (instance_id). Both use host, node, state, tenant_id, user_id.
type instanceFields struct {
	UUID         string        `json:"uuid"`
	InstanceID   string        `json:"instance_id"`
	Host         *string       `json:"host"`
	Node         *string       `json:"node"`
	State        string        `json:"state"`
	TenantID     string        `json:"tenant_id"`
	UserID       string        `json:"user_id"`
	RequestID    string        `json:"request_id"`
	VolumeID     string        `json:"volume_id"`
	OldVolumeID  string        `json:"old_volume_id"`
	NewVolumeID  string        `json:"new_volume_id"`
	BlockDevices []blockDevice `json:"block_devices"`
}

type blockDevice struct {
	Data struct {
		VolumeID   string `json:"volume_id"`
		DeviceName string `json:"device_name"`
		BootIndex  *int   `json:"boot_index"`
	} `json:"nova_object.data"`
}

type payload struct {
	Data *instanceFields `json:"nova_object.data"`
	instanceFields
}

func fillPayload(ev *Event, raw json.RawMessage, sp spec) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return decodeErr(ReasonBadPayload, ev.EventType, "payload must be a JSON object, got %s", clip(raw))
	}
	var p payload
	if err := unmarshal(raw, &p, "payload"); err != nil {
		de := err.(*DecodeError)
		de.EventType = ev.EventType
		if de.Reason == ReasonNotObject {
			de.Reason = ReasonBadPayload
		}
		return de
	}
	f := &p.instanceFields
	if p.Data != nil {
		f = p.Data
	}
	applyFields(ev, f)
	return checkPayload(ev, sp)
}

// applyFields copies the payload fields scour reads into ev.
func applyFields(ev *Event, f *instanceFields) {
	ev.InstanceUUID = f.UUID
	if ev.InstanceUUID == "" {
		ev.InstanceUUID = f.InstanceID
	}
	ev.Host = deref(f.Host)
	ev.Node = deref(f.Node)
	ev.State = f.State
	ev.ProjectID = f.TenantID
	ev.UserID = f.UserID
	if ev.RequestID == "" {
		ev.RequestID = f.RequestID
	}
	ev.VolumeID, ev.OldVolumeID, ev.NewVolumeID = f.VolumeID, f.OldVolumeID, f.NewVolumeID
	for _, b := range f.BlockDevices {
		ev.BlockDevices = append(ev.BlockDevices, BlockDevice{
			VolumeID: b.Data.VolumeID, DeviceName: b.Data.DeviceName, BootIndex: b.Data.BootIndex,
		})
	}
}

// checkPayload rejects relevant events missing what their command needs.
func checkPayload(ev *Event, sp spec) error {
	if ev.InstanceUUID == "" {
		return decodeErr(ReasonMissingInstance, ev.EventType, "payload has no instance uuid (uuid / instance_id)")
	}
	if !command.IsUUID(ev.InstanceUUID) {
		return decodeErr(ReasonInvalidID, ev.EventType, "instance uuid %q is not a UUID", clip([]byte(ev.InstanceUUID)))
	}
	for _, id := range append([]string{ev.VolumeID, ev.OldVolumeID, ev.NewVolumeID}, ev.VolumeIDs()...) {
		if id != "" && !command.IsUUID(id) {
			return decodeErr(ReasonInvalidID, ev.EventType, "instance %s: volume id %q is not a UUID", ev.InstanceUUID, clip([]byte(id)))
		}
	}
	switch sp.volume {
	case "attach", "detach":
		if ev.VolumeID == "" {
			return decodeErr(ReasonMissingVolume, ev.EventType, "instance %s: payload has no volume_id", ev.InstanceUUID)
		}
	case "swap":
		if ev.OldVolumeID == "" || ev.NewVolumeID == "" {
			return decodeErr(ReasonMissingVolume, ev.EventType, "instance %s: payload needs old_volume_id and new_volume_id", ev.InstanceUUID)
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
