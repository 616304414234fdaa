"""A2A 0.3 on the wire, read and written as the door's A2A 1.0 dicts: what a gateway door
says to an upstream that serves only A2A 0.3 (docs/a2a-0.3.md). Callers never see 0.3.

The mapping is a2a-sdk's (``a2a.compat.v0_3.conversions``, the official SDK's bridge
between the two versions); it is written again here over plain JSON, because the door
relays dicts and a2a-sdk is not a dependency of the runtime (its route is a pydantic
model and a protobuf message per object). tests/gateway/relay/test_v03_mapping.py checks
every mapping against a2a-sdk's.

In this order:

1. requests, 1.0 to 0.3: :data:`V03_METHODS` (``SendMessage`` is ``message/send``, ...),
   :func:`params_to_v03` (a message's ``kind`` and lower-case role, each part's ``kind``,
   ``raw``/``url`` as a ``file``, a ``data`` that is not an object wrapped as
   ``{"value": ...}`` with ``data_part_compat`` in its metadata, ``returnImmediately`` as
   ``blocking``, a ``historyLength`` of 0 left out: to 0.3 it means "all");
2. answers, 0.3 to 1.0: :func:`result_from_v03`: a ``message/send`` result (a ``task`` or
   a ``message`` by its ``kind``) wrapped as a SendMessageResponse, a stream event (also
   ``status-update`` and ``artifact-update``) as a StreamResponse, a ``tasks/get`` or
   ``tasks/cancel`` result as a Task; states, roles, parts and timestamps in 1.0's
   spelling; ``kind`` and a status update's ``final`` dropped (a task's history within the
   caller's ``historyLength`` is the relay's to keep, ``gateway.relay.methods``).

Anything in an answer that 0.3 does not define raises :class:`V03AnswerError` (a
``ValueError``); the relay turns it into the door's ``-32603`` naming the member.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from gateway.errors import GatewayError

__all__ = ["V03_METHODS", "V03AnswerError", "is_v03_version", "params_to_v03",
           "result_from_v03"]

#: The 1.0 methods a door relays, by their 0.3 names (ListTasks is the door's own).
V03_METHODS: Final = {
    "SendMessage": "message/send",
    "SendStreamingMessage": "message/stream",
    "GetTask": "tasks/get",
    "CancelTask": "tasks/cancel",
    "SubscribeToTask": "tasks/resubscribe",
}
_SEND_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage"})
_STATES: Final = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
_ROLES: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
#: The metadata key a2a-sdk marks a wrapped non-object ``data`` part with.
_DATA_COMPAT: Final = "data_part_compat"
#: Where each kind of event goes in a 1.0 StreamResponse.
_STREAM_KEYS: Final = {"task": "task", "message": "message",
                       "status-update": "statusUpdate", "artifact-update": "artifactUpdate"}


class V03AnswerError(GatewayError, ValueError):
    """An upstream's answer is not A2A 0.3; the text says what is wrong (never a value)."""


def is_v03_version(version: object) -> bool:
    """Whether a card's ``protocolVersion`` is A2A 0.3 (``0.3``, ``0.3.0``, ``0.3.1``)."""
    if not isinstance(version, str):
        return False
    parts = version.strip().split(".")
    return parts[:2] == ["0", "3"] and len(parts) <= 3 and all(p.isdigit() for p in parts)


# --------------------------------------------------------------------------------------
# 1. Requests, 1.0 to 0.3


def params_to_v03(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The 0.3 params of a relayed 1.0 request (``tenant`` has no 0.3 meaning: dropped)."""
    if method in _SEND_METHODS:
        sent: dict[str, Any] = {"message": _message_to_v03(params.get("message") or {}),
                                "configuration": _configuration_to_v03(
                                    params.get("configuration") or {})}
        _copy(params, sent, "metadata")
        return sent
    out: dict[str, Any] = {"id": params.get("id")}
    if method == "GetTask":
        _positive_history(params.get("historyLength"), out)
    elif method == "CancelTask":
        _copy(params, out, "metadata")
    return out


def _message_to_v03(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "message", "messageId": message.get("messageId"),
                           "role": "user" if message.get("role") == "ROLE_USER" else "agent",
                           "parts": [_part_to_v03(part) for part in message.get("parts") or ()]}
    for key in ("contextId", "taskId", "referenceTaskIds", "extensions", "metadata"):
        _copy(message, out, key)
    return out


def _part_to_v03(part: Mapping[str, Any]) -> dict[str, Any]:
    metadata = part.get("metadata")
    out: dict[str, Any]
    if "text" in part:
        out = {"kind": "text", "text": part["text"]}
    elif "raw" in part or "url" in part:
        file: dict[str, Any] = {"bytes": _standard_base64(part["raw"])} if "raw" in part \
            else {"uri": part["url"]}
        if part.get("mediaType"):
            file["mimeType"] = part["mediaType"]
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    else:
        data = part.get("data")
        if not isinstance(data, dict):
            data = {"value": data}
            metadata = {**(metadata or {}), _DATA_COMPAT: True}
        out = {"kind": "data", "data": data}
    if metadata:
        out["metadata"] = metadata
    return out


def _standard_base64(raw: Any) -> Any:
    """1.0 takes base64url too (ProtoJSON does); 0.3's ``bytes`` is standard base64."""
    return raw.replace("-", "+").replace("_", "/") if isinstance(raw, str) else raw


def _configuration_to_v03(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """``blocking`` always said (0.3 servers differ on its default); a push config never
    travels: a gateway door refuses push before it relays."""
    out: dict[str, Any] = {"blocking": configuration.get("returnImmediately") is not True}
    _copy(configuration, out, "acceptedOutputModes")
    _positive_history(configuration.get("historyLength"), out)
    return out


def _positive_history(length: Any, out: dict[str, Any]) -> None:
    """A ``historyLength`` above 0 as it is; 0 is "no history" in 1.0 and "all" in 0.3,
    so it is not sent (the relay drops the answer's history instead)."""
    if type(length) is int and length > 0:
        out["historyLength"] = length


# --------------------------------------------------------------------------------------
# 2. Answers, 0.3 to 1.0


def result_from_v03(method: str, result: Any) -> Any:
    """The 1.0 result of a relayed request's 0.3 ``result`` (one event's, for a stream)."""
    if method == "SendMessage" or method in ("SendStreamingMessage", "SubscribeToTask"):
        converted = _stream_response(result)
    elif method in ("GetTask", "CancelTask"):
        converted = _task(_object(result, "task"))
    else:  # pragma: no cover - the relay forwards only V03_METHODS
        raise V03AnswerError(f"the door does not relay {method} to an A2A 0.3 server")
    return converted


def _stream_response(result: Any) -> dict[str, Any]:
    body = _object(result, "result")
    kind = body.get("kind")
    key = _STREAM_KEYS.get(kind) if isinstance(kind, str) else None
    if key is None:
        raise V03AnswerError("sent a result whose kind is not task, message, "
                             "status-update or artifact-update")
    convert = {"task": _task, "message": _message, "statusUpdate": _status_update,
               "artifactUpdate": _artifact_update}[key]
    return {key: convert(body)}


def _task(task: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": task.get("id"), "contextId": task.get("contextId"),
                           "status": _status(_object(task.get("status"), "task status"))}
    if task.get("artifacts"):
        out["artifacts"] = [_artifact(_object(a, "artifact")) for a in task["artifacts"]]
    if task.get("history"):
        out["history"] = [_message(_object(m, "message")) for m in task["history"]]
    _copy(task, out, "metadata")
    return out


def _status(status: Mapping[str, Any]) -> dict[str, Any]:
    state = status.get("state")
    if state not in _STATES:
        raise V03AnswerError("sent a task state that A2A 0.3 does not define")
    out: dict[str, Any] = {"state": _STATES[state]}
    if status.get("message"):
        out["message"] = _message(_object(status["message"], "status message"))
    timestamp = _timestamp(status.get("timestamp"))
    if timestamp is not None:
        out["timestamp"] = timestamp
    return out


def _timestamp(value: Any) -> str | None:
    """An RFC 3339 UTC timestamp as ProtoJSON writes one (``...Z``, a fraction of 0, 3 or
    6 digits); a time without a zone is taken as UTC (as a2a-sdk 0.3's servers mean it);
    an unreadable one is left out."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    fraction = "" if not moment.microsecond else \
        f".{moment.microsecond // 1000:03d}" if moment.microsecond % 1000 == 0 else \
        f".{moment.microsecond:06d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"messageId": message.get("messageId"),
                           "role": _ROLES.get(str(message.get("role")), "ROLE_UNSPECIFIED"),
                           "parts": [_part(_object(p, "part")) for p in
                                     message.get("parts") or ()]}
    for key in ("contextId", "taskId", "referenceTaskIds", "extensions", "metadata"):
        _copy(message, out, key)
    return out


def _part(part: Mapping[str, Any]) -> dict[str, Any]:
    metadata = part.get("metadata")
    kind = part.get("kind") or next((k for k in ("text", "file", "data") if k in part), None)
    out: dict[str, Any]
    if kind == "text":
        out = {"text": part.get("text")}
    elif kind == "file":
        file = _object(part.get("file"), "file part")
        out = {"raw": file["bytes"]} if "bytes" in file else {"url": file.get("uri")}
        if file.get("mimeType"):
            out["mediaType"] = file["mimeType"]
        if file.get("name"):
            out["filename"] = file["name"]
    elif kind == "data":
        data = part.get("data")
        if isinstance(metadata, dict) and metadata.get(_DATA_COMPAT) is True and \
                isinstance(data, dict) and "value" in data:
            data = data["value"]
            metadata = {k: v for k, v in metadata.items() if k != _DATA_COMPAT}
        out = {"data": data}
    else:
        raise V03AnswerError("sent a part whose kind is not text, file or data")
    if metadata:
        out["metadata"] = metadata
    return out


def _artifact(artifact: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"artifactId": artifact.get("artifactId"),
                           "parts": [_part(_object(p, "part")) for p in
                                     artifact.get("parts") or ()]}
    for key in ("name", "description", "metadata", "extensions"):
        _copy(artifact, out, key)
    return out


def _status_update(event: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"taskId": event.get("taskId"), "contextId": event.get("contextId"),
                           "status": _status(_object(event.get("status"), "task status"))}
    _copy(event, out, "metadata")
    return out


def _artifact_update(event: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"taskId": event.get("taskId"), "contextId": event.get("contextId"),
                           "artifact": _artifact(_object(event.get("artifact"), "artifact"))}
    for key in ("append", "lastChunk"):  # false is their default: left out, as ProtoJSON does
        if event.get(key) is True:
            out[key] = True
    _copy(event, out, "metadata")
    return out


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise V03AnswerError(f"sent a {what} that is not a JSON object")
    return value


def _copy(source: Mapping[str, Any], target: dict[str, Any], key: str) -> None:
    """``source[key]`` into ``target`` when it is there and not null/empty."""
    value = source.get(key)
    if value is not None and value != [] and value != {}:
        target[key] = value
