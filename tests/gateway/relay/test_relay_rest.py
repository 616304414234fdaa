"""A gateway member whose upstream serves only the HTTP+JSON binding (a2a-sdk's REST
server): the door speaks REST to it (gateway/relay/rest_framing.py) and still offers both
bindings to its callers, with every guarantee of the relay (ownership, errors passed
through by their ErrorInfo reason, streams)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gateway.a2a.jsonrpc import ERROR_INFO_TYPE
from gateway.relay.client import UpstreamCardError
from gateway.relay.interfaces import UpstreamInterface, upstream_interface
from gateway.relay.rest_framing import RestFraming
from tests.support.door import send_params
from tests.support.upstream import gateway_member

WAIT_S = 10.0
JSON = {"Content-Type": "application/json"}


async def rpc(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            response = await client.get(f"/tasks/{task_id}")
            assert response.status_code == 200, response.text
            task: dict[str, Any] = response.json()
            if task["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_CANCELED",
                                           "TASK_STATE_FAILED", "TASK_STATE_INPUT_REQUIRED"):
                return task
            await asyncio.sleep(0.05)


def reason_of(response: httpx.Response) -> str:
    details = response.json()["error"]["details"]
    return next(d["reason"] for d in details if d["@type"] == ERROR_INFO_TYPE)


def sse_data(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def test_the_door_speaks_rest_to_a_rest_only_upstream_and_json_rpc_to_its_callers() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.operator) as client:
            body = await rpc(client, "SendMessage", send_params("hello"))
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "heard: hello" in json.dumps(task["artifacts"])
        paths = [request.path for request in formation.recorder.requests]
        assert "/message:send" in paths and "/" not in paths


async def test_both_bindings_reach_a_rest_only_upstream() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.planner, **JSON) as client:
            sent = await client.post("/message:send", json=send_params("hi", immediately=True))
            assert sent.status_code == 200, sent.text
            task_id = sent.json()["task"]["id"]
            done = await finished(client, task_id)
            assert done["status"]["state"] == "TASK_STATE_COMPLETED"
            rpc_view = await rpc(client, "GetTask", {"id": task_id})
            assert rpc_view["result"]["id"] == task_id
            listed = await client.get("/tasks")
            assert [t["id"] for t in listed.json()["tasks"]] == [task_id]


async def test_an_upstream_error_passes_through_by_its_reason_on_both_bindings() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.operator, **JSON) as client:
            sent = await client.post("/message:send", json=send_params("done"))
            task_id = sent.json()["task"]["id"]
            rest = await client.post(f"/tasks/{task_id}:cancel")
            json_rpc = await rpc(client, "CancelTask", {"id": task_id})
            unknown = await client.get("/tasks/no-such-task")
    assert rest.status_code == 400 and reason_of(rest) == "TASK_NOT_CANCELABLE"
    assert json_rpc["error"]["code"] == -32002
    assert unknown.status_code == 404 and reason_of(unknown) == "TASK_NOT_FOUND"


async def test_another_members_task_is_not_found_and_never_reaches_a_rest_upstream() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.planner, **JSON) as planner:
            sent = await planner.post("/message:send", json=send_params("mine"))
            task_id = sent.json()["task"]["id"]
        before = len(formation.recorder.requests)
        async with formation.client(formation.reviewer, **JSON) as reviewer:
            got = await reviewer.get(f"/tasks/{task_id}")
            canceled = await reviewer.post(f"/tasks/{task_id}:cancel")
    assert got.status_code == 404 and reason_of(got) == "TASK_NOT_FOUND"
    assert canceled.status_code == 404
    assert len(formation.recorder.requests) == before


async def test_a_stream_from_a_rest_upstream_is_relayed_on_both_bindings() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.operator, **JSON) as client:
            rest = await client.post("/message:stream", json=send_params("stream: go"))
            json_rpc = await client.post("/", json={
                "jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                "params": send_params("stream: again")})
    rest_events = sse_data(rest.text)
    rpc_events = [event["result"] for event in sse_data(json_rpc.text)]
    for events in (rest_events, rpc_events):
        assert "task" in events[0]
        last = events[-1]
        state = (last.get("statusUpdate") or last.get("task"))["status"]["state"]
        assert state == "TASK_STATE_COMPLETED"
        assert any("chunk 2" in json.dumps(event) for event in events)


async def test_input_required_then_resume_through_a_rest_upstream() -> None:
    async with gateway_member(binding="HTTP+JSON") as formation:
        async with formation.client(formation.planner, **JSON) as client:
            first = await client.post("/message:send", json=send_params("input: please"))
            task = first.json()["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            resumed = await client.post("/message:send", json=send_params(
                "more", taskId=task["id"], contextId=task["contextId"]))
    assert resumed.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_json_rpc_is_preferred_and_http_json_taken_when_alone() -> None:
    both = {"supportedInterfaces": [
        {"url": "http://127.0.0.1:9/rest", "protocolBinding": "HTTP+JSON",
         "protocolVersion": "1.0"},
        {"url": "http://127.0.0.1:9/rpc", "protocolBinding": "JSONRPC",
         "protocolVersion": "1.0"}]}
    card_url = "http://127.0.0.1:9/.well-known/agent-card.json"
    assert upstream_interface(both, card_url) == UpstreamInterface(
        "JSONRPC", "1.0", "http://127.0.0.1:9/rpc")
    rest_only = {"supportedInterfaces": both["supportedInterfaces"][:1]}
    assert upstream_interface(rest_only, card_url) == UpstreamInterface(
        "HTTP+JSON", "1.0", "http://127.0.0.1:9/rest")
    with pytest.raises(UpstreamCardError, match="JSONRPC or HTTP\\+JSON"):
        upstream_interface({"supportedInterfaces": [
            {"url": "http://x", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]}, card_url)


def test_rest_framing_writes_each_method_as_its_verb_and_path() -> None:
    framing = RestFraming("http://127.0.0.1:9/a2a/")
    assert framing.request("GetTask", {"id": "t/1", "historyLength": 2}) == (
        "GET", "http://127.0.0.1:9/a2a/tasks/t%2F1?historyLength=2", None)
    verb, url, body = framing.request("CancelTask", {"id": "t1", "tenant": "acme"})
    assert (verb, url) == ("POST", "http://127.0.0.1:9/a2a/acme/tasks/t1:cancel")
    assert body is not None and json.loads(body) == {"id": "t1", "tenant": "acme"}
    assert framing.request("SubscribeToTask", {"id": "t1"})[:2] == (
        "POST", "http://127.0.0.1:9/a2a/tasks/t1:subscribe")


def test_rest_framing_reads_only_a_status_with_a_known_reason_as_the_upstreams_error() -> None:
    framing = RestFraming("http://127.0.0.1:9")
    status = {"error": {"code": 404, "message": "gone", "details": [
        {"@type": ERROR_INFO_TYPE, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]}}
    with pytest.raises(Exception) as known:
        framing.answer(404, json.dumps(status).encode(), "coder", "GetTask")
    assert getattr(known.value, "code", None) == -32001
    with pytest.raises(Exception) as bare:
        framing.answer(404, b"<html>not found</html>", "coder", "GetTask")
    assert getattr(bare.value, "code", None) == -32603
    assert "127.0.0.1" not in str(bare.value) and "coder" in str(bare.value)


