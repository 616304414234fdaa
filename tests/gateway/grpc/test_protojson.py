"""gateway/grpc/protojson.py against json_format, the judge: every dict the door answers
with becomes the same message, every request message the same dict; what the fast path
does not cover (a ``Value``, a timestamp with nanoseconds or an offset, a number where
text belongs) still converts, through json_format."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.grpc.messages import POOL
from gateway.grpc.protojson import to_dict, to_message
from tests.support.grpc_messages import CARD, LIST, STREAM, TASK
from tests.support.grpc_messages import SEND_REQUEST as SEND

A_TASK: dict[str, Any] = {
    "id": "t1", "contextId": "c1",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T12:39:05.212113Z",
               "message": {"messageId": "m2", "role": "ROLE_AGENT",
                           "parts": [{"text": "done"}]}},
    "artifacts": [{"artifactId": "a1", "name": "essay",
                   "parts": [{"text": "one"}, {"data": {"k": [1, "x", None, True]}},
                             {"raw": "aGVsbG8=", "mediaType": "image/png",
                              "filename": "h.png"},
                             {"url": "https://example.com/f", "mediaType": "text/csv"}],
                   "metadata": {"nested": {"deep": [1.5, {"a": "b"}]}}}],
    "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                 "contextId": "c1", "taskId": "t1", "extensions": ["urn:x"],
                 "referenceTaskIds": ["t0"]}],
    "metadata": {"owner": "ci", "n": 3},
}


def judged(value: dict[str, Any], cls: Any) -> Any:
    message = cls()
    json_format.ParseDict(value, message, ignore_unknown_fields=True, descriptor_pool=POOL)
    return message


@pytest.mark.parametrize("value, cls", [
    (A_TASK, TASK),
    ({"task": A_TASK}, STREAM),
    ({"statusUpdate": {"taskId": "t1", "contextId": "c1",
                       "status": {"state": "TASK_STATE_WORKING"}}}, STREAM),
    ({"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": True,
                         "lastChunk": False, "artifact": A_TASK["artifacts"][0]}}, STREAM),
    ({"tasks": [A_TASK, A_TASK], "nextPageToken": "p2", "pageSize": 2, "totalSize": 7}, LIST),
    ({"name": "n", "description": "d", "version": "1",
      "supportedInterfaces": [{"url": "127.0.0.1:1", "protocolBinding": "GRPC",
                               "protocolVersion": "1.0"}],
      "capabilities": {"streaming": True, "extensions": [
          {"uri": "urn:s", "params": {"member": "m"}}]},
      "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
      "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
      "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
      "skills": [{"id": "s", "name": "S", "description": "", "tags": ["t"]}]}, CARD),
])
def test_a_result_becomes_the_message_json_format_makes(value: dict[str, Any], cls: Any) -> None:
    assert to_message(value, cls, POOL) == judged(value, cls)


@pytest.mark.parametrize("value", [
    {"id": "t", "status": {"state": "TASK_STATE_WORKING",
                           "timestamp": "2026-12-05T12:39:05.123456789Z"}},
    {"id": "t", "status": {"state": "TASK_STATE_WORKING",
                           "timestamp": "2026-12-05T14:39:05+02:00"}},
    {"id": "t", "status": {"state": 3}},
    {"id": "t", "unknownField": {"x": 1}, "contextId": "c"},
    {"id": "t", "metadata": {"x": float("inf")}},
    {"id": "t", "artifacts": [{"artifactId": "a", "parts": [{"data": None}]}]},
])
def test_what_the_plan_does_not_cover_still_converts(value: dict[str, Any]) -> None:
    assert to_message(value, TASK, POOL) == judged(value, TASK)


def test_a_value_of_the_wrong_type_is_left_to_json_format_which_refuses_it() -> None:
    with pytest.raises(json_format.ParseError):
        to_message({"id": 5}, TASK, POOL)


def test_a_request_becomes_the_dict_json_format_makes() -> None:
    request = judged({"message": A_TASK["history"][0] | {
        "parts": A_TASK["artifacts"][0]["parts"], "metadata": {"a": [1, 2]}},
        "configuration": {"returnImmediately": True, "historyLength": 2,
                          "acceptedOutputModes": ["text/plain"]},
        "metadata": {"k": "v"}}, SEND)
    assert to_dict(request, POOL) == json_format.MessageToDict(request, descriptor_pool=POOL)


_TEXT = st.text(max_size=12)
_JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False,
                                                            allow_infinity=False) | _TEXT,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(text=_TEXT, metadata=st.dictionaries(_TEXT, _JSON, max_size=4),
       state=st.sampled_from(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
                              "TASK_STATE_FAILED"]))
def test_any_task_converts_as_json_format_converts_it(text: str, metadata: dict[str, Any],
                                                      state: str) -> None:
    value = {"id": text or "t", "contextId": text, "status": {"state": state},
             "metadata": metadata,
             "artifacts": [{"artifactId": "a", "parts": [{"text": text}, {"data": metadata}]}]}
    assert to_message(value, TASK, POOL) == judged(value, TASK)
    assert to_dict(judged(value, TASK), POOL) == json_format.MessageToDict(
        judged(value, TASK), descriptor_pool=POOL)


def test_the_doors_own_task_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The door's states are StrEnum members: read as their names, never a fallback."""
    from gateway.protocol import TaskState

    def no_fallback(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("json_format was used")

    value = {"id": "t", "status": {"state": TaskState.COMPLETED,
                                   "timestamp": "2026-12-05T13:12:52.966Z"},
             "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}]}
    expected = judged({**value, "status": {**value["status"], "state": "TASK_STATE_COMPLETED"}},
                      TASK)
    monkeypatch.setattr(json_format, "ParseDict", no_fallback)
    assert to_message(value, TASK, POOL) == expected
