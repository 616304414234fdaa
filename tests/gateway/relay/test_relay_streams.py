"""The relay's streams (docs/gateway.md): Server-Sent Events relayed as they arrive,
and the door's own keep-alive while the upstream is silent. httpx.ASGITransport hands a
response over only once the app has finished, so these doors are served by uvicorn on
127.0.0.1 (tests/support/door.py ``serve``), in front of the in-loop a2a-sdk upstream."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

import gateway.sse
from tests.support.door import send_params, serve
from tests.support.upstream import CHUNK_INTERVAL_S, gateway_member

KEEP_ALIVE = ": keep-alive"
STREAM_WAIT_S = 5.0


def envelope(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def timed_lines(response: httpx.Response) -> list[tuple[float, str]]:
    """Every non-empty line of an SSE response with the time it arrived (bounded)."""
    lines: list[tuple[float, str]] = []
    async with asyncio.timeout(STREAM_WAIT_S):
        async for line in response.aiter_lines():
            if line:
                lines.append((time.monotonic(), line))
    return lines


def data_of(lines: list[tuple[float, str]]) -> list[tuple[float, dict[str, Any]]]:
    return [(at, json.loads(line[6:])["result"]) for at, line in lines
            if line.startswith("data: ")]


def status_text(event: dict[str, Any]) -> str | None:
    update = event.get("statusUpdate")
    if update is None:
        return None
    parts = update["status"].get("message", {}).get("parts", [])
    return parts[0]["text"] if parts else None


async def test_a_stream_is_relayed_event_by_event_as_the_upstream_sends_it() -> None:
    async with gateway_member() as formation, serve(formation.door.app) as url, \
            formation.client(formation.operator, base_url=url) as operator, \
            formation.client(formation.planner, base_url=url) as planner:
        async with operator.stream("POST", "/", json=envelope(
                "SendStreamingMessage", send_params("stream: go"))) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = await timed_lines(response)
        events = data_of(lines)
        task_id = events[0][1]["task"]["id"]
        others = (await planner.post("/", json=envelope("GetTask", {"id": task_id}))).json()
        own = (await operator.post("/", json=envelope("GetTask", {"id": task_id}))).json()
    chunks = {status_text(event): at for at, event in events
              if (status_text(event) or "").startswith("chunk")}
    assert list(chunks) == ["chunk 1", "chunk 2", "chunk 3"]
    ended_at = events[-1][0]
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert chunks["chunk 3"] - chunks["chunk 1"] >= 1.5 * CHUNK_INTERVAL_S, \
        "the chunks came together, not as the upstream sent them"
    assert ended_at - chunks["chunk 1"] >= 2 * CHUNK_INTERVAL_S
    assert others["error"]["code"] == -32001, "the stream's task is the operator's"
    assert own["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert formation.recorder.rpc_methods().count("SendStreamingMessage") == 1


@pytest.mark.parametrize("method", ["SendStreamingMessage", "SubscribeToTask"])
async def test_a_silent_upstream_stream_gets_the_doors_keep_alive_comments(
        method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.sse, "SSE_KEEPALIVE_SECONDS", 0.05)
    async with gateway_member() as formation, serve(formation.door.app) as url, \
            formation.client(formation.operator, base_url=url) as operator:
        if method == "SendStreamingMessage":
            params = send_params("slow: 0.8")
        else:
            begun = await operator.post("/", json=envelope(
                "SendMessage", send_params("slow: 0.8", immediately=True)))
            params = {"id": begun.json()["result"]["task"]["id"]}
        async with operator.stream("POST", "/", json=envelope(method, params)) as response:
            lines = await timed_lines(response)
    kinds = ["data" if line.startswith("data: ") else line for _, line in lines]
    assert set(kinds) <= {"data", KEEP_ALIVE}, kinds
    first_data, last_data = kinds.index("data"), len(kinds) - 1 - kinds[::-1].index("data")
    silent = kinds[first_data:last_data].count(KEEP_ALIVE)
    assert silent >= 3, f"only {silent} keep-alive comments while the upstream was silent"
    final = data_of(lines)[-1][1]
    assert final["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_subscribing_to_a_task_that_has_ended_is_answered_by_the_door() -> None:
    """An a2a-sdk upstream logs a warning for each ``-32004`` it answers; a call that
    ended before its caller subscribed (call_member's usual case) must not print one.
    Both a task the door saw end and one it has not seen end yet are answered here."""
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner:
        seen = (await planner.post("/", json=envelope(
            "SendMessage", send_params("hello")))).json()["result"]["task"]
        unseen = (await planner.post("/", json=envelope(
            "SendMessage", send_params("slow: 0.1", immediately=True)))).json()
        unseen_id = unseen["result"]["task"]["id"]
        await asyncio.sleep(0.5)
        answers = [(await planner.post("/", json=envelope("SubscribeToTask", {"id": task_id})
                                       )).json() for task_id in (seen["id"], unseen_id)]
    for answer in answers:
        assert answer["error"]["code"] == -32004, answer
        assert "TASK_STATE_COMPLETED" in answer["error"]["message"]
    assert "SubscribeToTask" not in formation.recorder.rpc_methods()
