"""gateway.door.streams: the bounds on live streams, in the book and at a real door (uvicorn on
127.0.0.1:0), on both bindings; each attack named by what it tries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.door.streams import StreamBook, StreamLimits
from gateway.door.tasks import GateConfig
from tests.support.door import make_door, rpc, send_params, serve, shimmed

# ------------------------------------------------------------------ the book


def test_an_owner_past_its_bound_is_refused_with_32050_and_a_retry_delay() -> None:
    book = StreamBook(per_owner=2, per_task=10, total=10)
    book.admit("bearer:ci")
    book.admit("bearer:ci")
    with pytest.raises(RpcError) as refused:
        book.admit("bearer:ci")
    assert refused.value.code == -32050
    assert refused.value.spec.reason == "TOO_MANY_STREAMS"
    assert refused.value.metadata == {"retryAfterMs": "1000"}
    assert refused.value.status_object()[0] == 429
    book.admit("operator")  # another owner is not held back


def test_a_task_past_its_bound_is_refused() -> None:
    book = StreamBook(per_owner=10, per_task=2, total=10)
    book.admit("operator", "t-1")
    ticket = book.admit("bearer:ci", "t-1")
    with pytest.raises(RpcError, match="the task is followed by 2 live streams"):
        book.admit("operator", "t-1")
    ticket.release()
    book.admit("operator", "t-1")  # a released place is free again
    book.admit("operator", "t-2")


def test_at_the_door_bound_the_oldest_stream_of_the_biggest_holder_makes_room() -> None:
    book = StreamBook(per_owner=10, per_task=10, total=4)
    first_ci = book.admit("bearer:ci")
    second_ci = book.admit("bearer:ci")
    book.admit("bearer:ci")
    operator = book.admit("operator")
    newcomer = book.admit("public")
    assert first_ci.evicted.is_set() and not second_ci.evicted.is_set()
    assert not operator.evicted.is_set() and not newcomer.evicted.is_set()
    assert len(book) == 4
    assert dict(book.holders()) == {"bearer:ci": 2, "operator": 1, "public": 1}
    first_ci.release()  # the evicted stream's own ending gives nothing back twice
    assert len(book) == 4


def test_bounds_below_one_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="per_task must be at least 1"):
        StreamBook(per_task=0)


# ------------------------------------------------------------------ a real door


async def held_agent(task: Any) -> str:
    await asyncio.sleep(60)  # a slow task: its streams stay open
    return "done"


async def open_subscription(client: httpx.AsyncClient, stack: AsyncExitStack, task_id: str,
                            caller: str, held: list[Any] | None = None) -> dict[str, Any]:
    """Open a SubscribeToTask stream and read its first event (or its refusal); the
    stream stays open while ``stack`` does (its line iterator is kept in ``held``, or on
    the stack: a dropped iterator would close the response)."""
    response = await stack.enter_async_context(client.stream(
        "POST", "/", json={"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                           "params": {"id": task_id}},
        headers={"x-test-caller": caller}))
    if not response.headers["content-type"].startswith("text/event-stream"):
        refusal: dict[str, Any] = json.loads(await response.aread())
        return refusal
    lines = response.aiter_lines()
    (held if held is not None else _HELD).append(lines)
    async for line in lines:
        if line.startswith("data: "):
            first: dict[str, Any] = json.loads(line[6:])
            return first
    return {}


_HELD: list[Any] = []


@pytest.fixture
async def door_url() -> AsyncIterator[str]:
    door = make_door(held_agent, gate=GateConfig(concurrency=4, queue_depth=0),
                     streams=StreamLimits(per_owner=5, per_task=8, total=12))
    async with serve(shimmed(door)) as url:
        yield url


async def test_one_credential_holding_streams_cannot_take_the_operators_requests(
        door_url: str) -> None:
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(base_url=door_url, limits=limits, timeout=10,
                                 headers={"A2A-Version": "1.0"}) as client, \
            AsyncExitStack() as stack:
        started = await rpc(client, "SendMessage", send_params("slow", immediately=True),
                            headers={"x-test-caller": "ci"})
        task_id = started["result"]["task"]["id"]
        answers = [await open_subscription(client, stack, task_id, "ci") for _ in range(8)]
        served = [answer for answer in answers if "result" in answer]
        refused = [answer for answer in answers if "error" in answer]
        assert len(served) == 5
        assert {answer["error"]["code"] for answer in refused} == {-32050}
        assert refused[0]["error"]["data"][0]["reason"] == "TOO_MANY_STREAMS"
        # the operator is served at once, unary and streaming
        got = await rpc(client, "GetTask", {"id": task_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
        followed = await open_subscription(client, stack, task_id, "operator")
        assert followed["result"]["task"]["id"] == task_id


async def test_rest_subscribe_past_the_bound_is_429_with_retry_after(door_url: str) -> None:
    async with httpx.AsyncClient(base_url=door_url, timeout=10,
                                 headers={"A2A-Version": "1.0"}) as client, \
            AsyncExitStack() as stack:
        started = await rpc(client, "SendMessage", send_params("slow", immediately=True),
                            headers={"x-test-caller": "ci"})
        task_id = started["result"]["task"]["id"]
        for _ in range(5):
            await open_subscription(client, stack, task_id, "ci")
        refused = await client.get(f"/tasks/{task_id}:subscribe",
                                   headers={"x-test-caller": "ci"})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


async def test_at_the_doors_bound_the_biggest_holders_oldest_stream_ends(door_url: str) -> None:
    """Total 12: ci holds 5 streams, public 5; the operator's 3rd stream ends ci's
    oldest (a clean end of its SSE body), not the operator's own."""
    async with httpx.AsyncClient(base_url=door_url, timeout=10,
                                 headers={"A2A-Version": "1.0"}) as client, \
            AsyncExitStack() as stack:
        tasks = {}
        for caller in ("ci", "public", "operator"):
            started = await rpc(client, "SendMessage", send_params("slow", immediately=True),
                                headers={"x-test-caller": caller})
            tasks[caller] = started["result"]["task"]["id"]
        ci_streams: list[Any] = []
        for _ in range(5):
            await open_subscription(client, stack, tasks["ci"], "ci", ci_streams)
        for _ in range(5):
            await open_subscription(client, stack, tasks["public"], "public")
        for _ in range(2):
            await open_subscription(client, stack, tasks["operator"], "operator")
        # 12 live; one more makes room at ci's expense
        assert (await open_subscription(client, stack, tasks["operator"], "operator"))["result"]

        async def rest(lines: Any) -> list[str]:
            return [line async for line in lines]

        await asyncio.wait_for(rest(ci_streams[0]), 5)  # the oldest ended
        done, _ = await asyncio.wait({asyncio.ensure_future(rest(ci_streams[1]))}, timeout=0.5)
        assert not done  # the others go on
