"""gateway/grpc/wire.py against the message the binding built before it (to_message, then
serialized): every result the door answers with is written straight to the same
message's bytes; what the writer does not cover comes back ``None`` and
``from_result`` builds the message instead, so the answer is the same message either
way."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.grpc.messages import POOL, from_result, message_class
from gateway.grpc.protojson import to_message
from gateway.grpc.wire import to_wire
from tests.support.grpc_messages import CARD, LIST, PUSH, STREAM, TASK
from tests.support.grpc_messages import SEND_RESPONSE as SEND

ARTIFACT: dict[str, Any] = {
    "artifactId": "a1", "name": "essay", "description": "",
    "parts": [{"text": "one"}, {"text": ""},
              {"data": {"k": [1, "x", None, True, -2.5e300, {"deep": []}]}},
              {"data": None}, {"data": "just text"}, {"data": 7},
              {"raw": "aGVsbG8=", "mediaType": "image/png", "filename": "h.png"},
              {"url": "https://example.com/f", "mediaType": "text/csv"}],
    "metadata": {"nested": {"deep": [1.5, {"a": "b"}]}, "n": 3, "none": None}}
A_TASK: dict[str, Any] = {
    "id": "t1", "contextId": "c1",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T12:39:05.212113Z",
               "message": {"messageId": "m2", "role": "ROLE_AGENT",
                           "parts": [{"text": "dé jà ✓ \U0001f600"}]}},
    "artifacts": [ARTIFACT],
    "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                 "contextId": "c1", "taskId": "t1", "extensions": ["urn:x", ""],
                 "referenceTaskIds": ["t0"]}],
    "metadata": {"owner": "ci", "n": 3},
}
CARD_VALUE: dict[str, Any] = {
    "name": "n", "description": "d", "version": "1",
    "supportedInterfaces": [{"url": "127.0.0.1:1", "protocolBinding": "GRPC",
                             "protocolVersion": "1.0"}],
    "capabilities": {"streaming": True, "pushNotifications": False, "extensions": [
        {"uri": "urn:s", "params": {"member": "m"}, "required": False}]},
    "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
                        "oauth": {"oauth2SecurityScheme": {"flows": {"clientCredentials": {
                            "tokenUrl": "https://x/t", "scopes": {"a": "b", "c": ""}}}}}},
    "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
    "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "S", "description": "", "tags": ["t"]}]}

#: Results the door answers with, each with its response type: all written straight.
COVERED = [
    (A_TASK, TASK),
    ({"task": A_TASK}, STREAM),
    ({"task": A_TASK}, SEND),
    ({"message": A_TASK["history"][0]}, SEND),
    ({"statusUpdate": {"taskId": "t1", "contextId": "c1",
                       "status": {"state": "TASK_STATE_WORKING"}}}, STREAM),
    ({"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": True,
                         "lastChunk": False, "artifact": ARTIFACT}}, STREAM),
    ({"tasks": [A_TASK, A_TASK], "nextPageToken": "p2", "pageSize": 2, "totalSize": 7}, LIST),
    ({"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": -1}, LIST),
    (CARD_VALUE, CARD),
    ({"id": "p", "taskId": "t", "url": "https://x/h", "token": "tok",
      "authentication": {"scheme": "Bearer"}}, PUSH),
    ({"id": "t", "status": {"state": "TASK_STATE_WORKING",
                            "timestamp": "1969-12-31T23:59:59.5Z"}}, TASK),
    ({"id": "t", "status": {"state": 3, "timestamp": "1970-01-01T00:00:00Z"}}, TASK),
    ({"id": "t", "unknownField": {"x": 1}, "context_id": "c"}, TASK),
    ({}, TASK),
]

#: What the writer leaves to the message (each still answered: from_result builds it).
UNCOVERED = [
    {"id": "t", "contextId": "c", "context_id": "c"},                     # named twice
    {"id": "t", "artifacts": [{"artifactId": "a", "parts": [
        {"text": "x", "url": "https://x"}]}]},                            # two oneof members
    {"id": "t", "status": {"state": "TASK_STATE_WORKING",
                           "timestamp": "2026-12-05T12:39:05.123456789Z"}},
    {"id": "t", "status": {"state": "TASK_STATE_WORKING",
                           "timestamp": "2026-12-05T14:39:05+02:00"}},
    {"id": "t", "status": {"state": "TASK_STATE_NOT_A_STATE"}},
    {"id": "t", "metadata": {"x": float("inf")}},
    {"id": "t", "artifacts": [{"artifactId": "a", "parts": [{"raw": "aGVsbG8-"}]}]},
    {"id": "t", "history": [None]},
    {"id": 5},
]


def via_message(value: dict[str, Any], cls: type[Message]) -> Message:
    """What the binding answered before the writer: the message to_message builds."""
    return to_message(value, cls, POOL)


@pytest.mark.parametrize(("value", "cls"), COVERED)
def test_a_result_is_written_as_the_bytes_of_the_message_it_stands_for(
        value: dict[str, Any], cls: type[Message]) -> None:
    written = to_wire(value, cls.DESCRIPTOR)
    assert written is not None
    assert cls.FromString(written) == via_message(value, cls)


def test_fields_in_number_order_are_written_byte_for_byte_as_protobuf_writes_them() -> None:
    """Defaults of fields without presence left out, lengths, tags, varints, nested
    messages, the timestamp: exactly protobuf's own bytes when the dict is in field
    order (no map in it: protobuf writes a map in an order of its own)."""
    value = {"id": "t1", "contextId": "", "status": {
        "state": "TASK_STATE_WORKING", "message": {
            "messageId": "m" * 200, "contextId": "c", "role": "ROLE_AGENT",
            "parts": [{"text": "x" * 20000}, {"url": "u", "filename": ""}]},
        "timestamp": "2026-12-05T12:39:05.212Z"},
        "artifacts": [{"artifactId": "a", "name": "", "parts": [{"text": ""}]}]}
    assert to_wire(value, TASK.DESCRIPTOR) == via_message(value, TASK).SerializeToString()


@pytest.mark.parametrize("value", UNCOVERED)
def test_what_the_writer_does_not_cover_is_left_to_the_message(value: dict[str, Any]) -> None:
    assert to_wire(value, TASK.DESCRIPTOR) is None


@pytest.mark.parametrize("value", [value for value, cls in COVERED if cls is TASK]
                         + UNCOVERED[:-2])
def test_every_result_is_answered_as_the_same_message_either_way(
        value: dict[str, Any]) -> None:
    assert TASK.FromString(from_result(value, TASK)) == via_message(value, TASK)


@pytest.mark.parametrize("value", [{"id": "t", "contextId": "\ud800"}, *UNCOVERED[-2:]])
def test_what_no_message_can_hold_is_refused_as_before(value: dict[str, Any]) -> None:
    """A lone surrogate, a null task, a number for text: json_format's refusal, which
    the binding answers as INTERNAL (as before the writer)."""
    assert to_wire(value, TASK.DESCRIPTOR) is None
    with pytest.raises(json_format.ParseError):
        from_result(value, TASK)


def test_a_null_data_part_is_a_null_value_not_no_value() -> None:
    value = {"artifactId": "a", "parts": [{"data": None}]}
    artifact = message_class("lf.a2a.v1.Artifact")
    written = to_wire(value, artifact.DESCRIPTOR)
    assert written is not None
    assert artifact.FromString(written).parts[0].HasField("data")
    assert artifact.FromString(written) == via_message(value, artifact)


_TEXT = st.text(max_size=12)
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**60), 2**60)
                     | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(text=_TEXT, metadata=st.dictionaries(_TEXT, _JSON, max_size=4), data=_JSON,
       state=st.sampled_from(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
                              "TASK_STATE_FAILED"]),
       millis=st.integers(0, 4_102_444_800_000))
def test_any_task_is_written_as_the_message_it_stands_for(
        text: str, metadata: dict[str, Any], data: Any, state: str, millis: int) -> None:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(millis / 1000, UTC)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"
    value = {"id": text or "t", "contextId": text,
             "status": {"state": state, "timestamp": stamp},
             "metadata": metadata,
             "artifacts": [{"artifactId": "a", "parts": [{"text": text}, {"data": data}]}]}
    written = to_wire(value, TASK.DESCRIPTOR)
    assert written is not None
    assert TASK.FromString(written) == via_message(value, TASK)
