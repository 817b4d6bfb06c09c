#!/usr/bin/env python3
"""Publish one notification through the real oslo.messaging, as nova does.

Run inside the RabbitMQ e2e container (its image carries python3-oslo.messaging)
by TestNotificationMatchesOslo. Argument: one JSON object with url, topic,
publisher_id, event_type, payload and context (user_id, project_id,
request_id, roles, timestamp). The context class mirrors nova's
RequestContext: its extra attributes and its to_dict additions, so
oslo.messaging's _sanitize_context / from_dict / serialize_context round trip
yields the keys nova-compute sends.
"""
import json
import sys

from oslo_config import cfg
from oslo_context import context
import oslo_messaging

ARGS = json.loads(sys.argv[1])
CTX_TIMESTAMP = ARGS["context"]["timestamp"]


class NovaContext(context.RequestContext):
    def __init__(self, read_deleted="no", remote_address=None, timestamp=None,
                 quota_class=None, service_catalog=None, **kwargs):
        super().__init__(**kwargs)
        self.read_deleted = read_deleted
        self.remote_address = remote_address
        self.timestamp = timestamp or CTX_TIMESTAMP
        self.quota_class = quota_class
        self.service_catalog = service_catalog or []

    def to_dict(self):
        values = super().to_dict()
        values.update({
            "user_id": self.user_id,
            "project_id": self.project_id,
            "is_admin": self.is_admin,
            "read_deleted": self.read_deleted,
            "remote_address": self.remote_address,
            "timestamp": self.timestamp,
            "request_id": self.request_id,
            "quota_class": self.quota_class,
            "user_name": self.user_name,
            "service_catalog": self.service_catalog,
            "project_name": self.project_name,
        })
        values.update({"is_admin_project": getattr(self, "is_admin_project", True)})
        return values


class NovaSerializer(oslo_messaging.NoOpSerializer):
    def serialize_context(self, ctxt):
        return ctxt.to_dict()


# nova/rpc.py: messaging.set_transport_defaults(control_exchange='nova').
oslo_messaging.set_transport_defaults(control_exchange="nova")
conf = cfg.ConfigOpts()
conf([])
transport = oslo_messaging.get_notification_transport(conf, url=ARGS["url"])
notifier = oslo_messaging.Notifier(
    transport, publisher_id=ARGS["publisher_id"], driver="messagingv2",
    serializer=NovaSerializer(), topics=[ARGS["topic"]])
c = ARGS["context"]
ctxt = NovaContext(user_id=c["user_id"], project_id=c["project_id"],
                   request_id=c["request_id"], roles=c["roles"], is_admin=True)
notifier.info(ctxt, ARGS["event_type"], ARGS["payload"])
transport.cleanup()
