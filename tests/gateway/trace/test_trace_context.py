"""gateway.trace.context: the W3C ``traceparent`` a door reads and records on
``a2a_task_received``, in both bindings, in-process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.door.app import DoorSettings, build_door
from gateway.door.card import CardInfo
from gateway.door.tasks import GateConfig, TaskRun
from gateway.trace.bus import TraceBus
from gateway.trace.context import Span, call_span, parse_traceparent, task_span, traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize("value", [
    VALID.upper(),                                  # hex is lower case
    f"ff-{TRACE}-{PARENT}-01",                      # version ff is invalid
    f"00-{'0' * 32}-{PARENT}-01",                   # an all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01",                    # an all-zero parent id
    f"00-{TRACE}-{PARENT}-01-extra",                # version 00 has four fields
    f"00-{TRACE[:-1]}-{PARENT}-01",                 # a short trace id
    "", "garbage", "00-" + "a" * 600,
])
def test_a_malformed_traceparent_is_no_trace_context(value: str) -> None:
    assert parse_traceparent(value.encode()) is None


def test_a_valid_traceparent_names_its_trace_and_parent() -> None:
    assert parse_traceparent(VALID.encode()) == (TRACE, PARENT)
    # A later version may add fields; its first four are read.
    assert parse_traceparent(f"01-{TRACE}-{PARENT}-01-more".encode()) == (TRACE, PARENT)


def test_a_task_span_is_a_child_of_the_caller_and_a_call_a_child_of_the_task() -> None:
    task = task_span(VALID.encode())
    assert (task.trace_id, task.parent_span_id) == (TRACE, PARENT)
    assert len(task.span_id) == 16 and task.span_id != PARENT
    call = call_span(task)
    assert (call.trace_id, call.parent_span_id) == (TRACE, task.span_id)
    assert traceparent(call) == f"00-{TRACE}-{call.span_id}-01".encode()
    root = task_span(None)
    assert root.parent_span_id is None and len(root.trace_id) == 32
    assert call_span(None).trace_id != root.trace_id


async def _echo(run: TaskRun) -> str:
    return run.text


def _door(records: list[dict[str, Any]]) -> Any:
    trace = TraceBus()
    trace.add_sink(records.append)
    settings = DoorSettings(card=CardInfo(name="coder", description="d", version="1",
                                          member="coder"),
                            gate=GateConfig(concurrency=4))
    return build_door(_echo, settings, trace=trace)


def _message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]}}


async def _send_rpc(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post("/", headers={"A2A-Version": "1.0", **headers}, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": _message("hi")})
    assert response.status_code == 200 and "result" in response.json(), response.text


async def _send_rest(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post("/message:send", headers={"A2A-Version": "1.0", **headers},
                                 json=_message("hi"))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("send", [_send_rpc, _send_rest], ids=["jsonrpc", "http+json"])
async def test_a_door_records_the_span_of_a_task_in_the_callers_trace(send: Any) -> None:
    records: list[dict[str, Any]] = []
    door = _door(records)
    transport = httpx.ASGITransport(app=door.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        await send(client, {"traceparent": VALID})
        await send(client, {})
        await send(client, {"traceparent": VALID.upper()})
        await send(client, {"traceparent": f"00-{TRACE}-0000000000000000-01"})
    received = [r for r in records if r["event"] == "a2a_task_received"]
    assert len(received) == 4
    joined, started, *ignored = received
    assert (joined["trace_id"], joined["parent_span_id"]) == (TRACE, PARENT)
    assert len(joined["span_id"]) == 16 and joined["span_id"] != PARENT
    for record in (started, *ignored):     # none, or malformed: a new trace starts
        assert record["parent_span_id"] is None
        assert record["trace_id"] != TRACE and len(record["trace_id"]) == 32
    assert len({r["trace_id"] for r in received}) == 4


async def test_a_traceparent_given_twice_is_no_trace_context() -> None:
    records: list[dict[str, Any]] = []
    transport = httpx.ASGITransport(app=_door(records).app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post("/", headers=[
            ("A2A-Version", "1.0"), ("traceparent", VALID), ("traceparent", VALID)], json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": _message("x")})
        assert response.status_code == 200
    [received] = [r for r in records if r["event"] == "a2a_task_received"]
    assert received["parent_span_id"] is None and received["trace_id"] != TRACE


def test_a_span_reads_as_record_fields() -> None:
    assert Span(TRACE, PARENT).fields() == {"trace_id": TRACE, "span_id": PARENT,
                                            "parent_span_id": None}
