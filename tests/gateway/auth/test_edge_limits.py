"""EdgeGuard (gateway/auth/edge_limits.py) in a real door, in process: depth, an edge's
``calls``, ``concurrent`` and ``per_minute``, on both HTTP bindings, for member calls
only, counted as tasks and in the metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.edge_limits import DoorBounds, EdgeLimits
from gateway.auth.tokens import FormationVerifier
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.auth import FORMATION, KEY, mint
from tests.support.door import card_info, send_params

OPERATOR = OperatorToken.generate()
RELEASE = asyncio.Event()


async def agent(task: TaskRun) -> str:
    if task.text == "hold":
        await RELEASE.wait()
    return "done"


def door(depth: int | None = None, **limits: Any) -> Any:
    bounds = DoorBounds(depth=depth, incoming={"planner": EdgeLimits(**limits)}
                        if limits else {})
    policy = AuthPolicy(authenticated=True, operator=OPERATOR, member="coder",
                        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
                        accept_peer_tasks=True, bounds=bounds)
    return build_door(agent, DoorSettings(card=card_info(),
                                          gate=GateConfig(concurrency=8, queue_depth=8)),
                      policy=policy)


def client(built: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=built.app),
                             base_url="http://127.0.0.1:8000", timeout=10)


def member_headers(depth: str | None = None, caller: str = "planner") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {mint(caller, 'coder')}", "A2A-Version": "1.0",
               "x-murmur-task-origin": "peer"}
    if depth is not None:
        headers["x-murmur-call-depth"] = depth
    return headers


async def release(built: Any, held: httpx.Response) -> None:
    """Let the held task end, and wait (at most 1 s) until the door saw it end."""
    RELEASE.set()
    task_id = held.json()["result"]["task"]["id"]
    for _ in range(100):
        if built.store._tasks[task_id].terminal:
            return
        await asyncio.sleep(0.01)


async def send(http: httpx.AsyncClient, text: str = "hi", *, rest: bool = False,
               headers: dict[str, str] | None = None) -> httpx.Response:
    params = send_params(text, immediately=True)
    headers = headers if headers is not None else member_headers()
    if rest:
        return await http.post("/message:send", json=params, headers=headers)
    return await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                      "params": params}, headers=headers)


async def test_a_call_past_the_depth_is_403_depth_exceeded_naming_it() -> None:
    built = door(depth=3)
    async with client(built) as http:
        passed = await send(http, headers=member_headers("3"))
        refused = await send(http, headers=member_headers("4"))
        operator = await send(http, headers={"Authorization": f"Bearer {OPERATOR.value}",
                                             "A2A-Version": "1.0",
                                             "x-murmur-call-depth": "99"})
    assert passed.status_code == 200 and "result" in passed.json()
    assert refused.status_code == 403
    assert refused.json() == {
        "error": "depth_exceeded", "message": "This call would be 4 member calls deep; the "
        "formation allows 3 (limits.depth in roster.yaml)."}
    # The operator's and a client's tasks are depth 0, whatever they send.
    assert operator.status_code == 200 and "result" in operator.json()
    depths = sorted(record.depth for record in built.store._tasks.values())
    assert depths == [0, 3]


@pytest.mark.parametrize("rest", [False, True])
async def test_calls_counts_tasks_and_the_next_is_403_limit_reached(rest: bool) -> None:
    built = door(calls=2)
    async with client(built) as http:
        answers = [await send(http, f"n{n}", rest=rest) for n in range(3)]
        reading = await http.get("/metrics", headers={
            "Authorization": f"Bearer {OPERATOR.value}"})
    assert [answer.status_code for answer in answers] == [200, 200, 403]
    assert answers[2].json()["error"] == "limit_reached"
    assert "made its 2 calls along this edge" in answers[2].json()["message"]
    assert ('murmur_bound_refusals_total{caller="planner",error="limit_reached",'
            'limit="calls"} 1.0') in reading.text


async def test_another_caller_and_other_methods_are_not_bounded() -> None:
    built = door(calls=1)
    async with client(built) as http:
        first = await send(http)
        task_id = first.json()["result"]["task"]["id"]
        again = await send(http)
        reviewer = await send(http, headers=member_headers(caller="reviewer"))
        read = await http.post("/", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                          "params": {"id": task_id}},
                               headers=member_headers())
    assert again.status_code == 403
    assert reviewer.status_code == 200 and "result" in reviewer.json()
    assert read.status_code == 200 and read.json()["result"]["id"] == task_id


async def test_concurrent_is_429_rate_limited_until_a_task_ends() -> None:
    RELEASE.clear()
    built = door(concurrent=1)
    async with client(built) as http:
        held = await send(http, "hold")
        slowed = await send(http, "second")
        await release(built, held)
        after = await send(http, "third")
    assert slowed.status_code == 429
    assert slowed.headers["retry-after"] == "1"
    assert slowed.json()["error"] == "rate_limited"
    assert slowed.json()["retryAfterMs"] == 1000
    assert "limits.concurrent (1)" in slowed.json()["message"]
    assert after.status_code == 200 and "result" in after.json()


async def test_per_minute_spaces_calls_with_retry_after() -> None:
    built = door(per_minute=2)
    async with client(built) as http:
        first = await send(http)
        second = await send(http)
    assert first.status_code == 200
    assert second.status_code == 429
    assert 29_000 <= second.json()["retryAfterMs"] <= 30_000
    assert second.headers["retry-after"] == "30"


async def test_a_busy_answer_gives_its_place_back() -> None:
    """A call the gate refuses (-32050) made no task: it does not count towards calls."""
    built = build_door(agent, DoorSettings(card=card_info(),
                                           gate=GateConfig(concurrency=1, queue_depth=0)),
                       policy=AuthPolicy(authenticated=True, operator=OPERATOR,
                                         member="coder", accept_peer_tasks=True,
                                         verifier=FormationVerifier(KEY.public_bytes,
                                                                    FORMATION),
                                         bounds=DoorBounds(incoming={"planner": EdgeLimits(
                                             calls=2)})))
    RELEASE.clear()
    async with client(built) as http:
        held = await send(http, "hold")
        busy = await send(http, "busy")
        await release(built, held)
        second = await send(http, "second")
    assert busy.json()["error"]["code"] == -32050
    assert second.status_code == 200 and "result" in second.json()
