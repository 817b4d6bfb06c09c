package notification

import "github.com/scour-project/scour/command"

// target says where a command for an event type goes.
type target int

const (
	// targetPayloadHost: the payload's host (where the instance now is),
	// else the publishing compute host, else a broadcast.
	targetPayloadHost target = iota
	// targetPublisherHost: the publishing compute host first. Used for
	// events emitted on the move SOURCE, whose payload host may already
	// name the destination (live_migration_post), and for events about
	// the emitting compute whose payload host is null or another host
	// (create.error, live_migration_rollback_dest).
	targetPublisherHost
	// targetBroadcast: every host (or, with bus.broadcast_routing, the
	// hosts holding a live claim of the instance); the host that matters
	// cannot be known from the message (resize_revert on the source while
	// the burned device is on the destination; resize_confirm, which a
	// cross-cell resize sends from nova-conductor as
	// "nova-compute:<conductor host>"; evacuate from nova-api).
	targetBroadcast
)

// spec describes one event type scour acts on.
type spec struct {
	kind   command.Kind
	target target
	volume string // attach | detach | swap for volume events
	// computeOnly: the event is emitted by nova-compute alone, so a legacy
	// publisher_id "compute.<host>" names a compute host. Legacy
	// notifications from nova-api use the same "compute." prefix with the
	// API host (nova/compute/api.py: get_notifier('compute', CONF.host)), so
	// for events the API can emit (delete, evacuate) that host means nothing.
	computeOnly bool
}

// eventTypes maps every event type scour acts on, in both formats, to what
// it means. Names from nova/notifications/objects (versioned) and
// nova/compute/manager.py _notify_about_instance_usage (legacy,
// "compute.instance." prefixed). Everything else is ignored.
var eventTypes = map[string]spec{
	// versioned
	"instance.create.end":                   {kind: command.KindClaim, computeOnly: true},
	"instance.unshelve.end":                 {kind: command.KindClaim, computeOnly: true},
	"instance.rebuild.end":                  {kind: command.KindClaim, computeOnly: true},
	"instance.resize_finish.end":            {kind: command.KindClaim, computeOnly: true},
	"instance.live_migration_post_dest.end": {kind: command.KindClaim, computeOnly: true},
	"instance.delete.end":                   {kind: command.KindRelease},
	"instance.shelve_offload.end":           {kind: command.KindShelveOffload, computeOnly: true},
	"instance.resize_confirm.end":           {kind: command.KindMoveSource, target: targetBroadcast},
	"instance.live_migration_post.end":      {kind: command.KindMoveSource, target: targetPublisherHost, computeOnly: true},
	"instance.resize_revert.end":            {kind: command.KindRevert, target: targetBroadcast},
	"instance.evacuate":                     {kind: command.KindReconcile, target: targetBroadcast},
	// A failed build (Nova deletes the allocations and reschedules) and a
	// live migration rolled back on the destination leave a device the
	// publishing compute burned, with no delete.end to follow there: that
	// host rescans at once instead of at its next periodic scan.
	"instance.create.error":                     {kind: command.KindReconcile, target: targetPublisherHost, computeOnly: true},
	"instance.live_migration_rollback_dest.end": {kind: command.KindReconcile, target: targetPublisherHost, computeOnly: true},
	"instance.volume_attach.end":                {kind: command.KindVolume, volume: "attach", computeOnly: true},
	"instance.volume_detach.end":                {kind: command.KindVolume, volume: "detach", computeOnly: true},
	"instance.volume_swap.end":                  {kind: command.KindVolume, volume: "swap", computeOnly: true},

	// legacy (unversioned)
	"compute.instance.create.end":                       {kind: command.KindClaim, computeOnly: true},
	"compute.instance.unshelve.end":                     {kind: command.KindClaim, computeOnly: true},
	"compute.instance.rebuild.end":                      {kind: command.KindClaim, computeOnly: true},
	"compute.instance.finish_resize.end":                {kind: command.KindClaim, computeOnly: true},
	"compute.instance.live_migration.post.dest.end":     {kind: command.KindClaim, computeOnly: true},
	"compute.instance.delete.end":                       {kind: command.KindRelease},
	"compute.instance.shelve_offload.end":               {kind: command.KindShelveOffload, computeOnly: true},
	"compute.instance.resize.confirm.end":               {kind: command.KindMoveSource, target: targetBroadcast},
	"compute.instance.live_migration._post.end":         {kind: command.KindMoveSource, target: targetPublisherHost, computeOnly: true},
	"compute.instance.resize.revert.end":                {kind: command.KindRevert, target: targetBroadcast},
	"compute.instance.evacuate":                         {kind: command.KindReconcile, target: targetBroadcast},
	"compute.instance.create.error":                     {kind: command.KindReconcile, target: targetPublisherHost, computeOnly: true},
	"compute.instance.live_migration.rollback.dest.end": {kind: command.KindReconcile, target: targetPublisherHost, computeOnly: true},
	"compute.instance.volume.attach":                    {kind: command.KindVolume, volume: "attach", computeOnly: true},
	"compute.instance.volume.detach":                    {kind: command.KindVolume, volume: "detach", computeOnly: true},
}

// EventTypes returns the event types scour acts on (for docs and tests).
func EventTypes() []string {
	out := make([]string, 0, len(eventTypes))
	for t := range eventTypes {
		out = append(out, t)
	}
	return out
}

// KindOf returns the command kind of an event type, "" when ignored.
func KindOf(eventType string) command.Kind { return eventTypes[eventType].kind }
