package harness

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// legacyNames maps versioned event types to the legacy (unversioned) names
// nova-compute emits for the same moment, where they differ from
// "compute." + the versioned name (nova/compute/manager.py).
var legacyNames = map[string]string{
	"instance.resize_finish.end":              "compute.instance.finish_resize.end",
	"instance.resize_finish.start":            "compute.instance.finish_resize.start",
	"instance.resize_confirm.end":             "compute.instance.resize.confirm.end",
	"instance.resize_confirm.start":           "compute.instance.resize.confirm.start",
	"instance.resize_revert.end":              "compute.instance.resize.revert.end",
	"instance.resize_revert.start":            "compute.instance.resize.revert.start",
	"instance.live_migration_post.end":        "compute.instance.live_migration._post.end",
	"instance.live_migration_post.start":      "compute.instance.live_migration._post.start",
	"instance.live_migration_post_dest.end":   "compute.instance.live_migration.post.dest.end",
	"instance.live_migration_post_dest.start": "compute.instance.live_migration.post.dest.start",
	"instance.volume_attach.end":              "compute.instance.volume.attach",
	"instance.volume_detach.end":              "compute.instance.volume.detach",
	"instance.evacuate":                       "compute.instance.evacuate",
}

func legacyEventType(versioned string) string {
	if n, ok := legacyNames[versioned]; ok {
		return n
	}
	return "compute." + versioned
}

// legacyPublisher turns "nova-compute:host" into the legacy notifier's
// "compute.host".
func legacyPublisher(p string) string {
	_, host, ok := strings.Cut(p, ":")
	if !ok {
		return p
	}
	return "compute." + host
}

// legacyPayload flattens a versioned InstancePayload into the keys of
// nova.notifications.base.info_from_instance, in its order.
func legacyPayload(d Object) Object {
	get := func(k string) any { v, _ := d.Get(k); return v }
	flavor := Object{}
	if f, ok := get("flavor").(Object); ok {
		if fd, ok := f.Get("nova_object.data"); ok {
			flavor, _ = fd.(Object)
		}
	}
	fl := func(k string) any { v, _ := flavor.Get(k); return v }
	num := func(v any) int64 {
		n, _ := v.(json.Number)
		i, _ := n.Int64()
		return i
	}
	diskGB := json.Number(strconv.FormatInt(num(fl("root_gb"))+num(fl("ephemeral_gb")), 10))
	progress := get("progress")
	if num(progress) == 0 {
		progress = ""
	}
	str := func(v any) any { // null_safe_str
		if v == nil {
			return ""
		}
		return v
	}
	return Object{
		{"tenant_id", get("tenant_id")},
		{"user_id", get("user_id")},
		{"instance_id", get("uuid")},
		{"display_name", get("display_name")},
		{"reservation_id", get("reservation_id")},
		{"hostname", get("host_name")},
		{"instance_type", fl("name")},
		{"instance_type_id", json.Number("1")},
		{"instance_flavor_id", fl("flavorid")},
		{"architecture", get("architecture")},
		{"memory_mb", fl("memory_mb")},
		{"disk_gb", diskGB},
		{"vcpus", fl("vcpus")},
		{"root_gb", fl("root_gb")},
		{"ephemeral_gb", fl("ephemeral_gb")},
		{"host", get("host")},
		{"node", get("node")},
		{"availability_zone", get("availability_zone")},
		{"cell_name", ""},
		{"created_at", str(get("created_at"))},
		{"terminated_at", str(get("terminated_at"))},
		{"deleted_at", str(get("deleted_at"))},
		{"launched_at", str(get("launched_at"))},
		{"image_ref_url", "http://fake-mini:9292/images/" + asString(get("image_uuid"))},
		{"os_type", get("os_type")},
		{"kernel_id", get("kernel_id")},
		{"ramdisk_id", get("ramdisk_id")},
		{"state", get("state")},
		{"state_description", str(get("task_state"))},
		{"progress", progress},
		{"access_ip_v4", nil},
		{"access_ip_v6", nil},
		{"fixed_ips", []any{}},
		{"metadata", orEmpty(get("metadata"))},
	}
}

func asString(v any) string { s, _ := v.(string); return s }

func orEmpty(v any) any {
	if v == nil {
		return Object{}
	}
	return v
}

// novaContext is the request context nova attaches to a notification: the
// keys of nova's RequestContext.to_dict in its order (oslo.context 5's keys,
// then nova's additions; Python's dict.update keeps existing keys in place),
// after oslo.messaging's _sanitize_context dropped the unsafe ones and nova
// rebuilt the context from the rest. The rabbit driver prefixes each key with
// "_context_".
func novaContext(ev Event, d Object) Object {
	project, _ := d.Get("tenant_id")
	user, _ := d.Get("user_id")
	reqID := orDefault(ev.RequestID, func() string { return "req-" + uuid4() })
	ts := ev.ContextTimestamp
	if ts.IsZero() {
		ts = ev.Timestamp
	}
	if ts.IsZero() {
		ts = time.Now()
	}
	identity := func(v any) string {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
		return "-"
	}
	return Object{
		{"user", user},
		{"project_id", project},
		{"system_scope", nil},
		{"project", project},
		{"domain", nil},
		{"user_domain", nil},
		{"project_domain", nil},
		{"is_admin", true},
		{"read_only", false},
		{"show_deleted", false},
		{"auth_token", nil},
		{"request_id", reqID},
		{"global_request_id", nil},
		{"resource_uuid", nil},
		{"roles", []any{"admin", "member", "reader"}},
		{"user_identity", identity(user) + " " + identity(project) + " - - -"},
		{"is_admin_project", true},
		{"user_id", user},
		{"read_deleted", "no"},
		{"remote_address", nil},
		{"timestamp", ts.UTC().Format("2006-01-02T15:04:05.000000")}, // nova.utils.strtime
		{"quota_class", nil},
		{"user_name", nil},
		{"service_catalog", []any{}},
		{"project_name", nil},
	}
}
