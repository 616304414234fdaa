"""A gateway door against callers and upstreams that try to take it over (docs/limits.md):
a hostile upstream whose one answer names thousands of tasks, and a credential that
holds as many streams as the door lets it open. Doors served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx

from gateway.door.app import DoorSettings
from gateway.door.streams import PER_TASK
from gateway.door.tasks import GateConfig
from gateway.http_io import read_body
from gateway.relay.client import UpstreamClient
from gateway.relay.tasks import RelayTasks, build_gateway_door
from gateway.trace.bus import TraceBus
from tests.support.door import card_info, send_params, serve
from tests.support.upstream import gateway_member

NAMED_IDS = 5000


def envelope(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


class HostileUpstream:
    """An A2A JSON-RPC server whose SendStreamingMessage answer names NAMED_IDS new
    tasks, each WORKING, and whose GetTask says every task works forever; it counts
    what it is asked."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = json.loads(await read_body(receive, 1 << 20))
        method = request["method"]
        self.calls[method] = self.calls.get(method, 0) + 1
        if method == "SendStreamingMessage":
            await self._flood(request["id"], send)
            return
        task_id = request["params"].get("id", "t-new")
        result = {"id": task_id, "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}
        if method == "SendMessage":
            result = {"task": {**result, "id": "t-new"}}
        answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    async def _flood(self, request_id: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})

        def event(result: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps({"jsonrpc": "2.0", "id": request_id,
                                           "result": result}).encode() + b"\n\n"

        first = {"task": {"id": "t-0", "contextId": "c-1",
                          "status": {"state": "TASK_STATE_WORKING"}}}
        chunks = [event(first)] + [event({"statusUpdate": {
            "taskId": f"t-{n}", "contextId": "c-1",
            "status": {"state": "TASK_STATE_WORKING"}}}) for n in range(1, NAMED_IDS)]
        for start in range(0, len(chunks), 500):
            await send({"type": "http.response.body", "body": b"".join(chunks[start:start + 500]),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


CARD = {"name": "hostile", "description": "names tasks it never started", "version": "1.0",
        "skills": [], "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"]}


async def hostile_door(upstream_url: str, records: list[dict[str, Any]]) -> Any:
    trace = TraceBus()
    trace.add_sink(records.append)
    client = UpstreamClient(upstream_url + "/", member="hostile", headers={})
    settings = DoorSettings(card=card_info(), gate=GateConfig(concurrency=2, queue_depth=0))
    return build_gateway_door(client, CARD, settings, trace=trace)


async def test_an_upstream_answer_naming_5000_ids_leaves_the_door_one_task_and_the_gate_open(
        ) -> None:
    upstream = HostileUpstream()
    records: list[dict[str, Any]] = []
    async with serve(upstream) as upstream_url:
        door = await hostile_door(upstream_url, records)
        try:
            async with serve(door.app) as url, httpx.AsyncClient(
                    base_url=url, timeout=20, headers={"A2A-Version": "1.0"}) as client:
                async with client.stream("POST", "/", json=envelope(
                        "SendStreamingMessage", send_params("flood"))) as response:
                    relayed = [line async for line in response.aiter_lines()
                               if line.startswith("data: ")]
                assert len(relayed) == NAMED_IDS  # relayed to its caller as it came
                relay = door.tasks
                assert isinstance(relay, RelayTasks)
                assert sorted(relay.state_counts().items()) == [("TASK_STATE_WORKING", 1)]
                assert relay.known("t-0") is not None and relay.known("t-1") is None
                assert relay.held == 1
                received = [r for r in records if r["event"] == "a2a_task_received"]
                ignored = [r for r in records if r["event"] == "upstream_task_ignored"]
                assert [r["task_id"] for r in received] == ["t-0"]
                assert len(ignored) == 1 and ignored[0]["task_id"] == "t-1"
                # the gate is open: another caller's task is taken
                answer = (await client.post("/", json=envelope(
                    "SendMessage", send_params("next", immediately=True)))).json()
                assert answer["result"]["task"]["id"] == "t-new"
                # and the door polls no more than the tasks it holds
                before = upstream.calls.get("GetTask", 0)
                await asyncio.sleep(1.0)
                polled = upstream.calls.get("GetTask", 0) - before
                assert polled <= 2 * 6  # two followers, at most every 0.2 s
        finally:
            await door.aclose()


async def subscribe(client: httpx.AsyncClient, stack: AsyncExitStack, task_id: str,
                    held: list[AsyncIterator[str]]) -> dict[str, Any]:
    """A SubscribeToTask stream's first event (kept open on ``stack``), or its refusal."""
    response = await stack.enter_async_context(client.stream(
        "POST", "/", json=envelope("SubscribeToTask", {"id": task_id})))
    if not response.headers["content-type"].startswith("text/event-stream"):
        refusal: dict[str, Any] = json.loads(await response.aread())
        return refusal
    lines = response.aiter_lines()
    held.append(lines)
    async for line in lines:
        if line.startswith("data: "):
            first: dict[str, Any] = json.loads(line[6:])
            return first
    return {}


async def slow_task(client: httpx.AsyncClient) -> str:
    """A task of the a2a-sdk upstream that works for 30 s (cancelable); its id."""
    started = (await client.post("/", json=envelope(
        "SendMessage", send_params("slow: 30", immediately=True)))).json()
    task_id: str = started["result"]["task"]["id"]
    return task_id


async def test_one_credential_holding_every_stream_it_can_leaves_the_operator_served(
        ) -> None:
    """planner subscribes to its one slow task until the door refuses it: the upstream
    sees one subscription, and the operator's GetTask and SendMessage are answered."""
    async with gateway_member() as formation, serve(formation.door.app) as url, \
            formation.client(formation.operator, base_url=url) as operator, \
            formation.client(formation.planner, base_url=url) as planner, \
            AsyncExitStack() as stack:
        task_id = await slow_task(planner)
        held: list[AsyncIterator[str]] = []
        answers = []
        for _ in range(PER_TASK + 8):  # bounded: past the door's bound on one task
            answers.append(await subscribe(planner, stack, task_id, held))
            if "error" in answers[-1]:
                break
        served = [answer for answer in answers if "result" in answer]
        assert len(served) == PER_TASK
        assert answers[-1]["error"]["code"] == -32050
        assert all(answer["result"]["task"]["id"] == task_id for answer in served)
        assert len(formation.recorder.rpc("SubscribeToTask")) == 1  # one upstream stream
        got = (await operator.post("/", json=envelope("GetTask", {"id": task_id}))).json()
        assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
        sent = (await operator.post("/", json=envelope(
            "SendMessage", send_params("hello", immediately=True)))).json()
        assert "task" in sent["result"]
        await operator.post("/", json=envelope("CancelTask", {"id": task_id}))


async def test_every_subscriber_of_a_shared_subscription_sees_the_task_end() -> None:
    async with gateway_member() as formation, serve(formation.door.app) as url, \
            formation.client(formation.planner, base_url=url) as planner, \
            formation.client(formation.operator, base_url=url) as operator, \
            AsyncExitStack() as stack:
        task_id = await slow_task(planner)
        held: list[AsyncIterator[str]] = []
        for _ in range(3):
            first = await subscribe(planner, stack, task_id, held)
            assert first["result"]["task"]["id"] == task_id
        await operator.post("/", json=envelope("CancelTask", {"id": task_id}))

        async def last_state(lines: AsyncIterator[str]) -> str:
            state = ""
            async for line in lines:
                if line.startswith("data: "):
                    result = json.loads(line[6:])["result"]
                    body = result.get("statusUpdate") or result.get("task") or {}
                    state = body.get("status", {}).get("state", state)
            return state

        ends = await asyncio.wait_for(asyncio.gather(*(last_state(lines) for lines in held)),
                                      10)
        assert ends == ["TASK_STATE_CANCELED"] * 3
        assert len(formation.recorder.rpc("SubscribeToTask")) == 1
