"""Every mapping of gateway/a2a/v03.py checked against a2a-sdk's own bridge between A2A
0.3 and 1.0 (``a2a.compat.v0_3.conversions``): requests written by the door for a 0.3
upstream are what a2a-sdk writes for the same 1.0 request, and 0.3 answers read back
are what a2a-sdk reads (as ProtoJSON). Where the two differ on purpose, the test says why."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import a2a_pb2 as pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from gateway.a2a.v03 import (
    V03_METHODS,
    V03AnswerError,
    is_v03_version,
    params_to_v03,
    result_from_v03,
)
from gateway.relay.client import UpstreamError
from gateway.relay.v03_framing import V03Framing

TIME = "2026-12-05T10:11:12.345678+00:00"

# ------------------------------------------------------------------ 1.0 requests

MESSAGE_10: dict[str, Any] = {
    "messageId": "m-1", "role": "ROLE_USER", "contextId": "c-1", "taskId": "t-1",
    "referenceTaskIds": ["t-0"], "extensions": ["https://example.invalid/ext"],
    "metadata": {"k": "v"},
    "parts": [
        {"text": "hello", "metadata": {"lang": "en"}},
        {"raw": "aGVsbG8=", "mediaType": "text/plain", "filename": "a.txt"},
        {"url": "https://example.invalid/b.png", "mediaType": "image/png"},
        {"data": {"answer": 42}},
        {"data": [1, 2, 3]},
        {"data": "just a string"},
    ],
}


def sdk_params(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a2a-sdk writes as the 0.3 params of the same 1.0 request."""
    core: Any
    if method == "SendMessage":
        core = ParseDict(params, pb2.SendMessageRequest())
        compat: Any = conversions.to_compat_send_message_request(core, 1)
    elif method == "GetTask":
        compat = conversions.to_compat_get_task_request(ParseDict(params, pb2.GetTaskRequest()), 1)
    elif method == "CancelTask":
        compat = conversions.to_compat_cancel_task_request(
            ParseDict(params, pb2.CancelTaskRequest()), 1)
    else:
        compat = conversions.to_compat_subscribe_to_task_request(
            ParseDict(params, pb2.SubscribeToTaskRequest()), 1)
    dumped: dict[str, Any] = json.loads(compat.model_dump_json(by_alias=True, exclude_none=True))
    return dumped["params"]


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_a_message_and_its_configuration_are_written_as_a2a_sdk_writes_them(method: str) -> None:
    params = {"message": MESSAGE_10, "metadata": {"trace": "x"},
              "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3,
                                "returnImmediately": True}}
    ours = params_to_v03(method, params)
    assert ours == sdk_params("SendMessage", params)
    assert ours["configuration"] == {"blocking": False, "acceptedOutputModes": ["text/plain"],
                                     "historyLength": 3}
    kinds = [part["kind"] for part in ours["message"]["parts"]]
    assert kinds == ["text", "file", "file", "data", "data", "data"]
    assert ours["message"]["parts"][4] == {"kind": "data", "data": {"value": [1, 2, 3]},
                                           "metadata": {"data_part_compat": True}}
    assert V03_METHODS[method] == {"SendMessage": "message/send",
                                   "SendStreamingMessage": "message/stream"}[method]


def test_a_message_without_configuration_is_sent_blocking_as_1_0_means_it() -> None:
    agent = {**MESSAGE_10, "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
    ours = params_to_v03("SendMessage", {"message": agent, "tenant": "acme"})
    assert ours["configuration"] == {"blocking": True}
    assert ours["message"]["role"] == "agent"
    assert "tenant" not in ours


def test_base64url_raw_bytes_become_standard_base64() -> None:
    part = {"raw": "-_8=", "mediaType": "application/octet-stream"}
    ours = params_to_v03("SendMessage", {"message": {**MESSAGE_10, "parts": [part]}})
    assert ours["message"]["parts"][0]["file"]["bytes"] == "+/8="


def test_a_history_length_of_zero_is_not_sent_because_0_3_reads_it_as_all() -> None:
    # a2a-sdk sends 0 as it is; to a 0.3 server 0 means the whole history, so the door
    # leaves it out and drops the history from the answer instead (test below).
    assert params_to_v03("GetTask", {"id": "t-1", "historyLength": 0}) == {"id": "t-1"}
    sent = params_to_v03("SendMessage", {"message": MESSAGE_10,
                                         "configuration": {"historyLength": 0}})
    assert "historyLength" not in sent["configuration"]


@pytest.mark.parametrize(("method", "params"), [
    ("GetTask", {"id": "t-1", "historyLength": 5}),
    ("GetTask", {"id": "t-1"}),
    ("CancelTask", {"id": "t-1", "metadata": {"why": "done"}}),
    ("SubscribeToTask", {"id": "t-1"}),
])
def test_task_requests_are_written_as_a2a_sdk_writes_them(
        method: str, params: dict[str, Any]) -> None:
    assert params_to_v03(method, params) == sdk_params(method, params)


def test_the_method_names_are_the_0_3_ones() -> None:
    assert V03_METHODS == {"SendMessage": "message/send",
                           "SendStreamingMessage": "message/stream",
                           "GetTask": "tasks/get", "CancelTask": "tasks/cancel",
                           "SubscribeToTask": "tasks/resubscribe"}


# ------------------------------------------------------------------ 0.3 answers

MESSAGE_03: dict[str, Any] = {
    "kind": "message", "messageId": "a-1", "role": "agent", "contextId": "c-1",
    "taskId": "t-1", "metadata": {"k": "v"},
    "parts": [
        {"kind": "text", "text": "heard: hello", "metadata": {"lang": "en"}},
        {"kind": "file", "file": {"bytes": "aGVsbG8=", "mimeType": "text/plain",
                                  "name": "a.txt"}},
        {"kind": "file", "file": {"uri": "https://example.invalid/b.png"}},
        {"kind": "data", "data": {"answer": 42}},
        {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}},
    ],
}
TASK_03: dict[str, Any] = {
    "kind": "task", "id": "t-1", "contextId": "c-1", "metadata": {"m": 1},
    "status": {"state": "completed", "timestamp": TIME, "message": MESSAGE_03},
    "history": [{**MESSAGE_03, "role": "user", "messageId": "u-1"}, MESSAGE_03],
    "artifacts": [{"artifactId": "a-1", "name": "answer", "description": "what it heard",
                   "parts": MESSAGE_03["parts"][:1], "metadata": {"x": True}}],
}


def sdk_read(model: Any, convert: Any, value: dict[str, Any]) -> dict[str, Any]:
    """What a2a-sdk reads from a 0.3 object, as ProtoJSON."""
    core = convert(model.model_validate(value))
    return MessageToDict(core)


def test_a_task_is_read_as_a2a_sdk_reads_it() -> None:
    ours = result_from_v03("GetTask", copy.deepcopy(TASK_03))
    assert ours == sdk_read(types_v03.Task, conversions.to_core_task, TASK_03)
    assert ours["status"]["state"] == "TASK_STATE_COMPLETED"
    assert ours["status"]["timestamp"] == "2026-12-05T10:11:12.345678Z"
    assert ours["history"][0]["role"] == "ROLE_USER"
    assert ours["status"]["message"]["parts"][4] == {"data": [1, 2]}
    assert "kind" not in json.dumps(ours)


@pytest.mark.parametrize(("state", "expected"), [
    ("submitted", "TASK_STATE_SUBMITTED"), ("working", "TASK_STATE_WORKING"),
    ("input-required", "TASK_STATE_INPUT_REQUIRED"), ("completed", "TASK_STATE_COMPLETED"),
    ("canceled", "TASK_STATE_CANCELED"), ("failed", "TASK_STATE_FAILED"),
    ("rejected", "TASK_STATE_REJECTED"), ("auth-required", "TASK_STATE_AUTH_REQUIRED"),
    ("unknown", "TASK_STATE_UNSPECIFIED"),
])
def test_every_state_is_read_as_a2a_sdk_reads_it(state: str, expected: str) -> None:
    task = {"kind": "task", "id": "t", "contextId": "c", "status": {"state": state}}
    ours = result_from_v03("GetTask", task)
    assert ours["status"]["state"] == expected
    sdk = sdk_read(types_v03.Task, conversions.to_core_task, task)
    assert sdk.get("status", {}).get("state", "TASK_STATE_UNSPECIFIED") == expected


@pytest.mark.parametrize("stamp", ["2026-12-05T10:11:12+00:00", "2026-12-05T10:11:12.5Z",
                                   "2026-12-05T10:11:12.123000+00:00"])
def test_timestamps_are_written_as_protojson_writes_them(stamp: str) -> None:
    task = {"kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "working", "timestamp": stamp}}
    ours = result_from_v03("GetTask", task)
    assert ours == sdk_read(types_v03.Task, conversions.to_core_task, task)


def test_a_timestamp_without_a_zone_is_utc_and_an_unreadable_one_is_left_out() -> None:
    naive = {"kind": "task", "id": "t", "contextId": "c",
             "status": {"state": "working", "timestamp": "2026-12-05T10:11:12"}}
    assert result_from_v03("GetTask", naive)["status"]["timestamp"] == \
        "2026-12-05T10:11:12Z"
    odd = {**naive, "status": {"state": "working", "timestamp": "yesterday"}}
    assert "timestamp" not in result_from_v03("GetTask", odd)["status"]


def test_a_send_result_is_wrapped_by_its_kind_as_a2a_sdk_wraps_it() -> None:
    for result, key in ((TASK_03, "task"), (MESSAGE_03, "message")):
        ours = result_from_v03("SendMessage", copy.deepcopy(result))
        sdk = MessageToDict(conversions.to_core_send_message_response(
            types_v03.SendMessageResponse.model_validate(
                {"jsonrpc": "2.0", "id": 1, "result": result})))
        assert ours == sdk
        assert list(ours) == [key]


@pytest.mark.parametrize("event", [
    TASK_03, MESSAGE_03,
    {"kind": "status-update", "taskId": "t-1", "contextId": "c-1", "final": True,
     "status": {"state": "failed", "message": MESSAGE_03}, "metadata": {"n": 1}},
    {"kind": "artifact-update", "taskId": "t-1", "contextId": "c-1", "append": True,
     "lastChunk": False, "artifact": TASK_03["artifacts"][0]},
])
def test_each_stream_event_is_read_as_a2a_sdk_reads_it(event: dict[str, Any]) -> None:
    ours = result_from_v03("SendStreamingMessage", copy.deepcopy(event))
    sdk = MessageToDict(conversions.to_core_stream_response(
        types_v03.SendStreamingMessageSuccessResponse.model_validate(
            {"jsonrpc": "2.0", "id": 1, "result": event})))
    assert ours == sdk
    assert "final" not in ours.get("statusUpdate", {})


@pytest.mark.parametrize("bad", [
    {"kind": "nonsense"},
    {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "pondering"}},
    {"kind": "message", "messageId": "m", "role": "agent", "parts": [{"kind": "video"}]},
    {"kind": "task", "id": "t", "contextId": "c", "status": "completed"},
    "a string",
])
def test_an_answer_that_is_not_0_3_is_refused_without_its_values(bad: Any) -> None:
    with pytest.raises(V03AnswerError) as refused:
        result_from_v03("SendMessage", bad)
    assert "pondering" not in str(refused.value) and "nonsense" not in str(refused.value)


@pytest.mark.parametrize(("version", "is_v03"), [
    ("0.3", True), ("0.3.0", True), ("0.3.1", True), ("1.0", False), ("0.2.5", False),
    ("0.3.x", False), (None, False), (0.3, False)])
def test_0_3_versions_are_recognised(version: object, is_v03: bool) -> None:
    assert is_v03_version(version) is is_v03


# ------------------------------------------------------------------ the framing


def test_the_framing_writes_0_3_json_rpc_and_reads_1_0_back() -> None:
    framing = V03Framing("http://127.0.0.1:9/")
    verb, url, body = framing.request("GetTask", {"id": "t-1", "historyLength": 0})
    assert (verb, url) == ("POST", "http://127.0.0.1:9/")
    assert body is not None
    sent = json.loads(body)
    assert sent["method"] == "tasks/get" and sent["params"] == {"id": "t-1"}
    answer = json.dumps({"jsonrpc": "2.0", "id": sent["id"], "result": TASK_03}).encode()
    task = framing.answer(200, answer, "coder", "GetTask")
    assert task["id"] == "t-1" and task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert framing.version == "0.3"


def test_the_upstreams_own_error_passes_through_and_an_unreadable_answer_names_the_member() -> None:
    framing = V03Framing("http://127.0.0.1:9/")
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}
    with pytest.raises(UpstreamError) as upstream:
        framing.answer(200, json.dumps(error).encode(), "coder", "GetTask")
    assert upstream.value.code == -32001
    odd = {"jsonrpc": "2.0", "id": 1, "result": {"kind": "nonsense"}}
    with pytest.raises(Exception) as unreadable:
        framing.event(json.dumps(odd).encode(), "coder", "SendStreamingMessage")
    assert getattr(unreadable.value, "code", None) == -32603
    assert "coder" in str(unreadable.value) and "0.3" in str(unreadable.value)
    assert "127.0.0.1" not in str(unreadable.value)
