#!/usr/bin/env python3
"""Writes the legacy (unversioned) fixtures in this directory.

Nova's legacy notifications carry the flat payload that
nova.notifications.base.info_from_instance builds (instance_id, host, node,
tenant_id, state, ...) plus extra_usage_info (volume_id for
volume.attach/detach). The publisher_id is "compute.<host>" (the compute
manager's notifier). The values here follow Nova's sample values so the two
formats can be compared field by field. Run from this directory.
"""
import json

UUID = "178b0921-8f85-4257-88b6-2e743b5a975c"
VOL = "a07f71dc-8151-4e7d-a0cc-cd24a3f11113"


def payload(host="compute", node="fake-mini", state="active", **extra):
    p = {
        "tenant_id": "6f70656e737461636b20342065766572",
        "user_id": "fake",
        "instance_id": UUID,
        "display_name": "some-server",
        "reservation_id": "r-npxv0e40",
        "hostname": "some-server",
        "instance_type": "test_flavor",
        "instance_type_id": 1,
        "instance_flavor_id": "a22d5517-147c-4147-a0d1-e698df5cd4e3",
        "memory_mb": 512,
        "disk_gb": 1,
        "root_gb": 1,
        "ephemeral_gb": 0,
        "vcpus": 1,
        "host": host,
        "node": node,
        "availability_zone": "nova",
        "cell_name": "",
        "created_at": "2012-10-29 13:42:11+00:00",
        "terminated_at": "",
        "deleted_at": "",
        "launched_at": "2012-10-29T13:42:11.000000",
        "image_ref_url": "http://fake/images/155d900f-4e14-4e4c-a73d-069cbf4541e6",
        "os_type": None,
        "kernel_id": "",
        "ramdisk_id": "",
        "state": state,
        "state_description": "",
        "progress": "",
        "access_ip_v4": None,
        "access_ip_v6": None,
        "image_meta": {},
        "metadata": {},
        "architecture": "x86_64",
    }
    p.update(extra)
    return p


CASES = {
    "compute.instance.create.end": dict(pub="compute.compute", p=payload(fixed_ips=[], message="Success")),
    "compute.instance.delete.end": dict(pub="compute.compute", p=payload(state="deleted")),
    # nova-api local delete (compute never scheduled): null host, API publisher.
    "compute.instance.delete.end_api": dict(et="compute.instance.delete.end", pub="compute.controller",
                                            p=payload(host=None, node=None, state="deleted")),
    "compute.instance.shelve_offload.end": dict(pub="compute.compute", p=payload(host=None, node=None, state="shelved_offloaded")),
    "compute.instance.unshelve.end": dict(pub="compute.compute", p=payload()),
    "compute.instance.finish_resize.end": dict(pub="compute.host2", p=payload(host="host2", node="host2", state="resized")),
    # emitted on the source; the payload host already names the destination.
    "compute.instance.resize.confirm.end": dict(pub="compute.compute", p=payload(host="host2", node="host2")),
    # cross-cell resize: nova-conductor confirms, with its own legacy
    # notifier (nova/conductor/tasks/cross_cell_migrate.py).
    "compute.instance.resize.confirm.end_conductor": dict(et="compute.instance.resize.confirm.end", pub="compute.conductor",
                                                          p=payload(host="host2", node="host2")),
    # the build failed on the compute that claimed the device; Nova reschedules.
    "compute.instance.create.error": dict(pub="compute.compute", p=payload(host=None, node=None, state="building")),
    # emitted on the destination; the payload host is still the source.
    "compute.instance.live_migration.rollback.dest.end": dict(pub="compute.host2", p=payload()),
    "compute.instance.resize.revert.end": dict(pub="compute.compute", p=payload()),
    "compute.instance.live_migration._post.end": dict(pub="compute.compute", p=payload(host="host2", node="host2")),
    "compute.instance.live_migration.post.dest.end": dict(pub="compute.host2", p=payload(host="host2", node="host2")),
    "compute.instance.rebuild.end": dict(pub="compute.compute", p=payload()),
    "compute.instance.volume.attach": dict(pub="compute.compute", p=payload(volume_id=VOL)),
    "compute.instance.volume.detach": dict(pub="compute.compute", p=payload(volume_id=VOL)),
    "compute.instance.evacuate": dict(pub="compute.controller", p=payload(host="compute")),
    "compute.instance.exists": dict(pub="compute.compute", p=payload(audit_period_beginning="", audit_period_ending="")),
    "compute.instance.update": dict(pub="compute.compute", p=payload()),
}

for name, c in CASES.items():
    msg = {
        "event_type": c.get("et", name),
        "payload": c["p"],
        "priority": "INFO",
        "publisher_id": c["pub"],
    }
    with open(name + ".json", "w") as f:
        json.dump(msg, f, indent=2, sort_keys=True)
        f.write("\n")
