"""The A2A wire types (gateway.a2a.models) and the JSON-RPC framing (gateway.a2a.jsonrpc)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.a2a.jsonrpc import (
    ERROR_BY_CODE,
    ERROR_TABLE,
    RequestError,
    RpcError,
    encode_error,
    encode_result,
    invalid_params,
    member_busy,
    parse_body,
    parse_request,
)
from gateway.a2a.models import (
    AgentCard,
    ListTasksRequest,
    Message,
    Part,
    SendMessageRequest,
    parse_task_state,
)
from gateway.door.jsonrpc_binding import sse_error, sse_result
from gateway.protocol import TaskState, state_word

# --- parts and messages ------------------------------------------------------------


@pytest.mark.parametrize("content", [
    {"text": "hi"}, {"raw": "aGk="}, {"url": "https://example.com/x.png"},
    {"data": {"a": 1}}, {"data": None}, {"data": [1, 2]},
])
def test_a_part_with_exactly_one_content_is_accepted(content: dict[str, object]) -> None:
    assert Part.model_validate(content).wire() == content


@pytest.mark.parametrize("content", [{}, {"text": "a", "url": "b"}, {"raw": "aGk=", "data": 1},
                                     {"filename": "x.txt", "mediaType": "text/plain"}])
def test_a_part_with_none_or_two_contents_is_refused(content: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="exactly one of text, raw, url or data"):
        Part.model_validate(content)


def test_raw_bytes_are_carried_as_standard_base64() -> None:
    part = Part(raw=b"\xff\xfe binary", media_type="application/octet-stream",  # type: ignore[arg-type]
                filename="blob.bin")
    wire = part.wire()
    assert wire == {"raw": base64.b64encode(b"\xff\xfe binary").decode(),
                    "mediaType": "application/octet-stream", "filename": "blob.bin"}
    assert Part.model_validate(wire).raw_bytes() == b"\xff\xfe binary"


def test_raw_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ValidationError, match="raw must be base64"):
        Part.model_validate({"raw": "not base64!"})


def test_message_role_takes_proto_names_and_numbers() -> None:
    by_name = Message.model_validate({"messageId": "m", "role": "ROLE_USER",
                                      "parts": [{"text": "x"}]})
    by_number = Message.model_validate({"messageId": "m", "role": 2, "parts": [{"text": "x"}]})
    assert by_name.wire()["role"] == "ROLE_USER"
    assert by_number.wire()["role"] == "ROLE_AGENT"


@pytest.mark.parametrize("message, field", [
    ({"role": "ROLE_USER", "parts": [{"text": "x"}]}, "messageId"),
    ({"messageId": "m", "parts": [{"text": "x"}]}, "role"),
    ({"messageId": "m", "role": "ROLE_USER", "parts": []}, "parts"),
    ({"messageId": "m", "role": "user", "parts": [{"text": "x"}]}, "role"),
    ({"messageId": "m", "role": "ROLE_UNSPECIFIED", "parts": [{"text": "x"}]}, "role"),
])
def test_a_bad_message_names_its_field(message: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Message.model_validate(message)
    assert field in str(caught.value)


def test_unknown_fields_are_ignored() -> None:
    request = SendMessageRequest.model_validate({
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],
                    "futureField": 1},
        "alsoUnknown": True})
    assert "futureField" not in request.message.wire()


def test_task_states_parse_from_names_and_numbers() -> None:
    assert parse_task_state("TASK_STATE_WORKING") is TaskState.WORKING
    assert parse_task_state(3) is TaskState.COMPLETED
    with pytest.raises(ValueError, match="TASK_STATE_SUBMITTED"):
        parse_task_state("running")
    with pytest.raises(ValueError):
        parse_task_state(True)


def test_list_tasks_request_bounds_page_size() -> None:
    assert ListTasksRequest.model_validate({"pageSize": 100}).page_size == 100
    for size in (0, 101, -1):
        with pytest.raises(ValidationError, match="pageSize"):
            ListTasksRequest.model_validate({"pageSize": size})
    assert ListTasksRequest.model_validate({"status": "TASK_STATE_UNSPECIFIED"}).status is None


def test_agent_card_requires_an_interface() -> None:
    with pytest.raises(ValidationError, match="supportedInterfaces"):
        AgentCard.model_validate({"name": "n", "description": "d", "version": "1",
                                  "supportedInterfaces": [], "capabilities": {},
                                  "defaultInputModes": [], "defaultOutputModes": [],
                                  "skills": []})


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_survive_a_raw_part(data: bytes) -> None:
    wire = Part(raw=data).wire()  # type: ignore[arg-type]
    assert Part.model_validate(json.loads(json.dumps(wire))).raw_bytes() == data


# --- JSON-RPC framing --------------------------------------------------------------


def test_the_error_table_holds_the_a2a_codes() -> None:
    codes = {spec.code for spec in ERROR_TABLE.values()}
    assert set(range(-32009, -32000)) <= codes
    assert {-32700, -32600, -32601, -32602, -32603, -32050} <= codes
    # one row per code, but -32050: a busy member and too many streams (a caller waits
    # and tries again either way), told apart by their ErrorInfo reasons
    assert len(codes) == len(ERROR_TABLE) - 1
    shared = [name for name, spec in ERROR_TABLE.items() if spec.code == -32050]
    assert shared == ["MEMBER_BUSY", "TOO_MANY_STREAMS"]
    assert ERROR_BY_CODE[-32050] is ERROR_TABLE["MEMBER_BUSY"]  # an upstream's -32050


def test_an_error_carries_an_error_info_first() -> None:
    error = RpcError("TASK_NOT_FOUND").error_object()
    assert error["code"] == -32001
    assert error["message"] == "Task not found"
    assert error["data"][0] == {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                                "metadata": {}}


def test_member_busy_names_its_retry_delay() -> None:
    error = member_busy(250).error_object()
    assert error["code"] == -32050
    assert error["message"] == "member busy"
    info, retry = error["data"]
    assert info["reason"] == "MEMBER_BUSY"
    assert info["metadata"] == {"retryAfterMs": "250"}
    assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.250s"}


def test_invalid_params_names_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        SendMessageRequest.model_validate({"message": {"messageId": "m", "role": "ROLE_USER",
                                                       "parts": [{}]}})
    error = invalid_params(caught.value).error_object()
    assert error["code"] == -32602
    assert "message.parts.0" in error["message"]
    assert error["data"][1]["fieldViolations"][0]["field"] == "message.parts.0"


@pytest.mark.parametrize("value, fragment", [
    ([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}], "batch"),
    ("text", "JSON object"),
    ({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, "jsonrpc"),
    ({"jsonrpc": "2.0", "method": "GetTask"}, "'id'"),
    ({"jsonrpc": "2.0", "id": True, "method": "GetTask"}, "'id'"),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}, "'id'"),
    ({"jsonrpc": "2.0", "id": 1, "method": ""}, "method"),
    ({"jsonrpc": "2.0", "id": 1, "method": 7}, "method"),
])
def test_a_malformed_request_is_invalid_request(value: object, fragment: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(value)
    assert caught.value.error.code == -32600
    assert fragment in caught.value.error.message


def test_params_must_be_an_object() -> None:
    with pytest.raises(RequestError) as caught:
        parse_request({"jsonrpc": "2.0", "id": "a", "method": "GetTask", "params": [1]})
    assert caught.value.error.code == -32602
    assert caught.value.request_id == "a"


def test_a_body_that_is_not_json_is_a_parse_error() -> None:
    with pytest.raises(RequestError) as caught:
        parse_body(b"{nope")
    assert caught.value.error.code == -32700
    assert caught.value.request_id is None


def test_responses_are_compact_json_rpc() -> None:
    assert json.loads(encode_result("x", {"a": "é"})) == {"jsonrpc": "2.0", "id": "x",
                                                         "result": {"a": "é"}}
    error = json.loads(encode_error(3, RpcError("TASK_NOT_CANCELABLE", "it ended")))
    assert error["error"]["message"] == "Task cannot be canceled: it ended"


def test_sse_events_are_one_data_line_each() -> None:
    event = sse_result(1, {"text": "two\nlines"})
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert event.count(b"\n") == 2, "a newline inside the JSON is escaped"
    error = sse_error(1, RpcError("INTERNAL_ERROR"))
    assert error.startswith(b"event: error\ndata: ")


def test_state_words() -> None:
    """One rule for every state, named or new (``mur``'s lines, result.txt, the trace
    tree): the prefix goes, lower case, hyphens."""
    assert state_word("TASK_STATE_INPUT_REQUIRED") == "input-required"
    assert state_word("TASK_STATE_CANCELED") == "canceled"
    assert state_word("TASK_STATE_SOMETHING_NEW") == "something-new"
    assert state_word(None) == "unknown"
