"""murmur-door's wire, usable without the launcher: tokens and credentials, the door and
its auth middleware, the A2A 1.0 bindings, the formation and forward proxies,
call-member, a gateway member's relay, the trace. Nothing here manages files or
processes; that is ``launcher``'s job (docs/architecture.md).

This is its public face: every name in ``__all__`` is importable from ``gateway`` itself
(``from gateway import build_door, DoorSettings``). Each is loaded from its module on
first use, so ``import gateway.protocol`` (which the launcher and ``mur`` import at
start) stays as light as the standard library. The launcher imports nothing of the wire
that is not listed here (tests/gateway/test_public_face.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module it lives in.
_EXPORTS: dict[str, str] = {
    "RpcError": "gateway.a2a.jsonrpc",
    "dumps": "gateway.a2a.jsonrpc",
    "Part": "gateway.a2a.models",
    "CredentialError": "gateway.auth.credentials",
    "DeclaredBearer": "gateway.auth.credentials",
    "JwtIssuer": "gateway.auth.credentials",
    "OperatorToken": "gateway.auth.credentials",
    "AuthPolicy": "gateway.auth.door_auth",
    "APPROVAL_ROOM": "gateway.auth.edge_limits",
    "APPROVE_QUEUE_DEFAULT": "gateway.auth.edge_limits",
    "APPROVE_QUEUE_MAX": "gateway.auth.edge_limits",
    "DoorBounds": "gateway.auth.edge_limits",
    "CallBounds": "gateway.proxy.call_bounds",
    "DepthOf": "gateway.proxy.call_bounds",
    "EdgeLimits": "gateway.auth.edge_limits",
    "FormationKey": "gateway.auth.tokens",
    "FormationVerifier": "gateway.auth.tokens",
    "InvalidToken": "gateway.auth.tokens",
    "b64url_decode_canonical": "gateway.auth.tokens",
    "b64url_encode": "gateway.auth.tokens",
    "Door": "gateway.door.app",
    "DoorSettings": "gateway.door.app",
    "PublicGrpc": "gateway.door.app",
    "build_door": "gateway.door.app",
    "CardInfo": "gateway.door.card",
    "card_signature": "gateway.door.card_signing",
    "key_id": "gateway.door.card_signing",
    "media_type_problem": "gateway.door.media_types",
    "Skill": "gateway.door.card",
    "StreamLimits": "gateway.door.streams",
    "AgentFn": "gateway.door.tasks",
    "GateConfig": "gateway.door.tasks",
    "TaskRun": "gateway.door.tasks",
    "message_text": "gateway.door.task_record",
    "DoorMetrics": "gateway.metrics",
    "A2A_VERSION": "gateway.protocol",
    "CARD_PATH": "gateway.protocol",
    "HTTP_JSON_BINDING": "gateway.protocol",
    "MEMBER_NAME_RE": "gateway.protocol",
    "PEERS_ENV": "gateway.protocol",
    "PROXY_ENV": "gateway.protocol",
    "SESSION_EXTENSION_URI": "gateway.protocol",
    "TERMINAL_STATES": "gateway.protocol",
    "TaskState": "gateway.protocol",
    "VERSION_HEADER": "gateway.protocol",
    "state_word": "gateway.protocol",
    "default_inner_transport": "gateway.proxy.aiohttp_transport",
    "CallFailed": "gateway.proxy.call_failed",
    "CALLER_ENDED": "gateway.proxy.call_failed",
    "ERROR": "gateway.proxy.call_failed",
    "REFUSED": "gateway.proxy.call_failed",
    "fence": "gateway.proxy.call_member",
    "PendingAnswer": "gateway.proxy.pending_answer",
    "parts_text": "gateway.proxy.egress",
    "aevent_data": "gateway.sse",
    "CallHandle": "gateway.proxy.call_member",
    "MemberCalls": "gateway.proxy.call_member",
    "AllowList": "gateway.proxy.egress",
    "answer_text": "gateway.proxy.egress",
    "failure_text": "gateway.proxy.egress",
    "check_callees": "gateway.proxy.egress",
    "egress_reaches_loopback": "gateway.proxy.egress",
    "peers_environ": "gateway.proxy.egress",
    "virtual_address": "gateway.proxy.egress",
    "proxy_environment": "gateway.proxy.env",
    "proxy_url": "gateway.proxy.env",
    "CALLING_TASK": "gateway.proxy.formation",
    "DoorDirectory": "gateway.proxy.formation",
    "FormationTransport": "gateway.proxy.formation",
    "FormationClient": "gateway.proxy.formation_client",
    "ForwardProxy": "gateway.proxy.forward",
    "InferenceBounds": "gateway.proxy.inference",
    "InferenceEgress": "gateway.proxy.inference",
    "DoorUnavailable": "gateway.proxy.proxy_errors",
    "EgressRefused": "gateway.proxy.proxy_errors",
    "FormationRefused": "gateway.proxy.proxy_errors",
    "names_formation": "gateway.proxy.virtual_names",
    "redact": "gateway.redaction",
    "redact_value": "gateway.redaction",
    "UpstreamCardError": "gateway.relay.client",
    "UpstreamClient": "gateway.relay.client",
    "fetch_card": "gateway.relay.client",
    "new_session": "gateway.relay.client",
    "UpstreamInterface": "gateway.relay.interfaces",
    "JournaledTask": "gateway.door.task_listeners",
    "KeptTask": "gateway.door.task_listeners",
    "upstream_interface": "gateway.relay.interfaces",
    "RestFraming": "gateway.relay.rest_framing",
    "build_gateway_door": "gateway.relay.tasks",
    "event_data": "gateway.sse",
    "TraceBus": "gateway.trace.bus",
    "TraceRecord": "gateway.trace.bus",
    "Span": "gateway.trace.context",
    "TaskSpans": "gateway.trace.context",
    "call_span": "gateway.trace.context",
    "traceparent": "gateway.trace.context",
    "ASGIApp": "gateway.types",
}
__all__ = [
    "A2A_VERSION",
    "APPROVAL_ROOM",
    "APPROVE_QUEUE_DEFAULT",
    "APPROVE_QUEUE_MAX",
    "ASGIApp",
    "AgentFn",
    "AllowList",
    "AuthPolicy",
    "CALLER_ENDED",
    "CALLING_TASK",
    "CARD_PATH",
    "CallFailed",
    "CallHandle",
    "CardInfo",
    "CredentialError",
    "DeclaredBearer",
    "DoorBounds",
    "Door",
    "DoorDirectory",
    "DoorMetrics",
    "DoorSettings",
    "PublicGrpc",
    "DoorUnavailable",
    "ERROR",
    "EgressRefused",
    "FormationClient",
    "FormationKey",
    "FormationRefused",
    "FormationTransport",
    "FormationVerifier",
    "ForwardProxy",
    "GateConfig",
    "HTTP_JSON_BINDING",
    "InferenceBounds",
    "InferenceEgress",
    "InvalidToken",
    "JwtIssuer",
    "MEMBER_NAME_RE",
    "MemberCalls",
    "OperatorToken",
    "PEERS_ENV",
    "PROXY_ENV",
    "Part",
    "PendingAnswer",
    "REFUSED",
    "RestFraming",
    "RpcError",
    "SESSION_EXTENSION_URI",
    "Skill",
    "Span",
    "StreamLimits",
    "TERMINAL_STATES",
    "TaskRun",
    "TaskSpans",
    "TaskState",
    "TraceBus",
    "TraceRecord",
    "UpstreamCardError",
    "UpstreamClient",
    "UpstreamInterface",
    "JournaledTask",
    "KeptTask",
    "VERSION_HEADER",
    "aevent_data",
    "answer_text",
    "failure_text",
    "b64url_decode_canonical",
    "b64url_encode",
    "build_door",
    "build_gateway_door",
    "call_span",
    "check_callees",
    "dumps",
    "default_inner_transport",
    "egress_reaches_loopback",
    "event_data",
    "fence",
    "fetch_card",
    "message_text",
    "names_formation",
    "new_session",
    "parts_text",
    "peers_environ",
    "proxy_environment",
    "proxy_url",
    "redact",
    "redact_value",
    "state_word",
    "traceparent",
    "upstream_interface",
    "virtual_address",
    "EdgeLimits",
    "CallBounds",
    "DepthOf",
    "card_signature",
    "key_id",
    "media_type_problem",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it at once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, typed, for mypy and editors
    from gateway.a2a.jsonrpc import RpcError, dumps
    from gateway.a2a.models import Part
    from gateway.auth.credentials import CredentialError, DeclaredBearer, JwtIssuer, OperatorToken
    from gateway.auth.door_auth import AuthPolicy
    from gateway.auth.edge_limits import (
        APPROVAL_ROOM,
        APPROVE_QUEUE_DEFAULT,
        APPROVE_QUEUE_MAX,
        DoorBounds,
        EdgeLimits,
    )
    from gateway.auth.tokens import (
        FormationKey,
        FormationVerifier,
        InvalidToken,
        b64url_decode_canonical,
        b64url_encode,
    )
    from gateway.door.app import Door, DoorSettings, PublicGrpc, build_door
    from gateway.door.card import CardInfo, Skill
    from gateway.door.card_signing import card_signature, key_id
    from gateway.door.media_types import media_type_problem
    from gateway.door.streams import StreamLimits
    from gateway.door.task_listeners import JournaledTask, KeptTask
    from gateway.door.task_record import message_text
    from gateway.door.tasks import AgentFn, GateConfig, TaskRun
    from gateway.metrics import DoorMetrics
    from gateway.protocol import (
        A2A_VERSION,
        CARD_PATH,
        HTTP_JSON_BINDING,
        MEMBER_NAME_RE,
        PEERS_ENV,
        PROXY_ENV,
        SESSION_EXTENSION_URI,
        TERMINAL_STATES,
        VERSION_HEADER,
        TaskState,
        state_word,
    )
    from gateway.proxy.aiohttp_transport import default_inner_transport
    from gateway.proxy.call_bounds import CallBounds, DepthOf
    from gateway.proxy.call_failed import CallFailed
    from gateway.proxy.call_member import CallHandle, MemberCalls
    from gateway.proxy.egress import (
        AllowList,
        answer_text,
        check_callees,
        egress_reaches_loopback,
        failure_text,
        peers_environ,
        virtual_address,
    )
    from gateway.proxy.env import proxy_environment, proxy_url
    from gateway.proxy.formation import CALLING_TASK, DoorDirectory, FormationTransport
    from gateway.proxy.formation_client import FormationClient
    from gateway.proxy.forward import ForwardProxy
    from gateway.proxy.proxy_errors import DoorUnavailable, EgressRefused, FormationRefused
    from gateway.proxy.virtual_names import names_formation
    from gateway.redaction import redact, redact_value
    from gateway.relay.client import (
        UpstreamCardError,
        UpstreamClient,
        fetch_card,
        new_session,
    )
    from gateway.relay.interfaces import UpstreamInterface, upstream_interface
    from gateway.relay.rest_framing import RestFraming
    from gateway.relay.tasks import build_gateway_door
    from gateway.sse import event_data
    from gateway.trace.bus import TraceBus, TraceRecord
    from gateway.trace.context import Span, TaskSpans, call_span, traceparent
    from gateway.types import ASGIApp
