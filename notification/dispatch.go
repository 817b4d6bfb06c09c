package notification

import (
	"fmt"

	"github.com/scour-project/scour/command"
)

// Dispatch turns a relevant event into the command scour publishes on its
// own exchange, or returns nil for an ignored event. The target host is:
//
//   - for live_migration_post (from the move source), create.error and
//     live_migration_rollback_dest (about the emitting compute, whose
//     payload host is null or the migration's source): the publishing
//     compute host, else the payload host;
//   - otherwise the payload host, else the publishing compute host (the
//     payload host is null after shelve_offload);
//   - a broadcast when no host can be known: always for resize_revert
//     (emitted on the source while the burned device is on the destination),
//     resize_confirm (a cross-cell resize confirms from nova-conductor,
//     whose publisher_id "nova-compute:<conductor host>" names no compute;
//     the source's claim is found by the claims, not the message) and
//     evacuate (emitted by nova-api before a destination is chosen), and
//     for a delete from nova-api with a null host.
//
// The command names an instance and what happened, never a device (safety
// rule 3). An error wraps command.ErrInvalid.
func Dispatch(ev *Event) (*command.Command, error) {
	sp, ok := eventTypes[ev.EventType]
	if !ok {
		return nil, nil
	}
	c := &command.Command{
		Version:      command.Version,
		Kind:         sp.kind,
		Node:         ev.Node,
		InstanceUUID: ev.InstanceUUID,
		ProjectID:    ev.ProjectID,
		UserID:       ev.UserID,
		State:        ev.State,
		EventType:    ev.EventType,
		Format:       string(ev.Format),
		MessageID:    ev.MessageID,
		RequestID:    ev.RequestID,
		Timestamp:    ev.Timestamp,
		Volumes:      ev.VolumeIDs(),
	}
	c.Host = targetHost(ev, sp)
	c.Scope = command.ScopeHost
	if c.Host == "" {
		c.Scope = command.ScopeBroadcast
	}
	if sp.volume != "" {
		c.Volume = volumeChange(ev, sp.volume)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("event %s instance %s: %w", ev.EventType, ev.InstanceUUID, err)
	}
	return c, nil
}

func targetHost(ev *Event, sp spec) string {
	publisher := computePublisherHost(ev, sp)
	switch sp.target {
	case targetBroadcast:
		return ""
	case targetPublisherHost:
		if publisher != "" {
			return publisher
		}
		return ev.Host
	default:
		if ev.Host != "" {
			return ev.Host
		}
		return publisher
	}
}

// computePublisherHost returns the publisher's host when the publisher is a
// nova-compute service, else "".
func computePublisherHost(ev *Event, sp spec) string {
	switch {
	case ev.PublisherService == "nova-compute":
		return ev.PublisherHost
	case ev.PublisherService == "compute" && sp.computeOnly:
		return ev.PublisherHost
	}
	return ""
}

func volumeChange(ev *Event, action string) *command.VolumeChange {
	v := &command.VolumeChange{Action: action, VolumeID: ev.VolumeID, OldVolumeID: ev.OldVolumeID, NewVolumeID: ev.NewVolumeID}
	for _, b := range ev.BlockDevices {
		if b.IsRoot() && b.VolumeID != "" && (b.VolumeID == ev.VolumeID || b.VolumeID == ev.OldVolumeID || b.VolumeID == ev.NewVolumeID) {
			v.IsRoot = true
		}
	}
	return v
}
