"""The A2A message classes of the door's own descriptor pool that the conversion tests
(protojson, wire) build and compare (no tests here)."""

from __future__ import annotations

from gateway.grpc.messages import message_class

TASK = message_class("lf.a2a.v1.Task")
STREAM = message_class("lf.a2a.v1.StreamResponse")
LIST = message_class("lf.a2a.v1.ListTasksResponse")
CARD = message_class("lf.a2a.v1.AgentCard")
SEND_REQUEST = message_class("lf.a2a.v1.SendMessageRequest")
SEND_RESPONSE = message_class("lf.a2a.v1.SendMessageResponse")
PUSH = message_class("lf.a2a.v1.TaskPushNotificationConfig")
