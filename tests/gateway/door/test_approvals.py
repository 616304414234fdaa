"""Calls that wait for the operator (gateway/door/approvals.py) at a real door, in
process: accepted in auth-required and marked so call-member waits, listed, approved,
denied, withdrawn by CancelTask, and bounded in number: each caller to its share of the
room (``approve_queue``, default 16), all of them to the room (64); member callers
cannot decide."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.edge_limits import APPROVE_QUEUE_MAX, DoorBounds, EdgeLimits
from gateway.auth.tokens import FormationVerifier
from gateway.door.app import DoorSettings, build_door
from gateway.door.approvals import APPROVE_QUEUE_DEFAULT, MAX_WAITING
from gateway.door.tasks import GateConfig, TaskRun
from gateway.proxy.member_rpc import awaits_approval, is_final
from tests.support.auth import FORMATION, KEY, mint
from tests.support.door import card_info, send_params

OPERATOR = OperatorToken.generate()


async def agent(task: TaskRun) -> str:
    return f"deployed {task.text}"


def door(incoming: dict[str, EdgeLimits] | None = None) -> Any:
    """The door of ``coder``, whose callers' calls wait for the operator (``planner``'s
    alone unless ``incoming`` says)."""
    policy = AuthPolicy(authenticated=True, operator=OPERATOR, member="coder",
                        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
                        accept_peer_tasks=True, bounds=DoorBounds(incoming=incoming or {
                            "planner": EdgeLimits(approve=True, approve_timeout=600.0)}))
    return build_door(agent, DoorSettings(card=card_info(), gate=GateConfig(
        concurrency=2, queue_depth=MAX_WAITING + 8)), policy=policy)


def client(built: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=built.app),
                             base_url="http://127.0.0.1:8000", timeout=10)


async def call(http: httpx.AsyncClient, method: str, params: dict[str, Any],
               token: str) -> dict[str, Any]:
    response = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": params},
                               headers={"Authorization": f"Bearer {token}",
                                        "A2A-Version": "1.0"})
    body: dict[str, Any] = response.json()
    return body


async def offer(http: httpx.AsyncClient, text: str, caller: str = "planner") -> dict[str, Any]:
    answer = await call(http, "SendMessage", send_params(text, immediately=True),
                        mint(caller, "coder"))
    task: dict[str, Any] = answer["result"]["task"]
    return task


async def refused(http: httpx.AsyncClient, caller: str) -> dict[str, Any]:
    """A call of ``caller`` that does not wait: its JSON-RPC error."""
    answer = await call(http, "SendMessage", send_params("one more", immediately=True),
                        mint(caller, "coder"))
    error: dict[str, Any] = answer["error"]
    return error


async def test_a_call_waits_marked_and_listed_until_approved() -> None:
    built = door()
    async with client(built) as http:
        task = await offer(http, "v2")
        assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
        assert awaits_approval(task) and not is_final(task)
        listed = await call(http, "murmur.ListApprovals", {}, OPERATOR.value)
        [row] = listed["result"]["approvals"]
        assert (row["taskId"], row["caller"], row["text"]) == (task["id"], "planner", "v2")
        # A member may not decide (DoorAuth: outside a formation token's scopes).
        refused = await http.post("/", json={"jsonrpc": "2.0", "id": 1,
                                             "method": "murmur.ApproveTask",
                                             "params": {"id": task["id"]}},
                                  headers={"Authorization": f"Bearer {mint()}"})
        assert refused.status_code == 403
        approved = await call(http, "murmur.ApproveTask", {"id": task["id"]}, OPERATOR.value)
        assert approved["result"]["id"] == task["id"]
        final = await built.tasks.result(task["id"])
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert final["artifacts"][0]["parts"][0]["text"] == "deployed v2"


async def test_deny_rejects_with_the_reason_and_an_unknown_id_is_not_found() -> None:
    built = door()
    async with client(built) as http:
        task = await offer(http, "prod")
        denied = await call(http, "murmur.DenyTask", {"id": task["id"], "reason": "freeze"},
                            OPERATOR.value)
        unknown = await call(http, "murmur.DenyTask", {"id": "nope"}, OPERATOR.value)
        listed = await call(http, "murmur.ListApprovals", {}, OPERATOR.value)
    assert denied["result"]["status"]["state"] == "TASK_STATE_REJECTED"
    assert "Denied by the operator: freeze" in str(denied["result"]["status"])
    assert unknown["error"]["code"] == -32001
    assert listed["result"]["approvals"] == []


async def test_a_waiting_task_canceled_by_its_caller_leaves_the_list() -> None:
    built = door()
    async with client(built) as http:
        task = await offer(http, "x")
        canceled = await call(http, "CancelTask", {"id": task["id"]}, mint())
        listed = await call(http, "murmur.ListApprovals", {}, OPERATOR.value)
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert listed["result"]["approvals"] == []


def approving(*callers: str, **shares: int) -> dict[str, EdgeLimits]:
    """Edges into ``coder`` whose calls wait: ``callers`` with the default share, and
    ``shares`` with their ``approve_queue``."""
    edges = {name: EdgeLimits(approve=True, approve_timeout=600.0) for name in callers}
    edges.update({name: EdgeLimits(approve=True, approve_timeout=600.0, approve_queue=share)
                  for name, share in shares.items()})
    return edges


async def test_past_max_waiting_a_call_is_answered_busy() -> None:
    """Four callers each at the default share fill the room: a fifth is busy, and the
    message says the room is full, not that the fifth holds too much."""
    callers = [f"m{n}" for n in range(MAX_WAITING // APPROVE_QUEUE_DEFAULT + 1)]
    built = door(approving(*callers))
    async with client(built) as http:
        for caller in callers[:-1]:
            for n in range(APPROVE_QUEUE_DEFAULT):
                await offer(http, f"n{n}", caller)
        error = await refused(http, callers[-1])
    assert error["code"] == -32050
    assert f"{MAX_WAITING} calls wait for the operator here" in error["message"]
    assert error["data"][0]["metadata"]["retryAfterMs"]


async def test_one_caller_filling_its_share_leaves_the_room_to_another() -> None:
    """The lockout (issue 52): ``planner`` offers calls until refused; it holds its
    default share (16) and no more, told busy naming ``approve_queue``, while
    ``reviewer``'s call still waits and is approved."""
    built = door(approving("planner", "reviewer"))
    async with client(built) as http:
        for n in range(APPROVE_QUEUE_DEFAULT):
            await offer(http, f"n{n}")
        error = await refused(http, "planner")
        task = await offer(http, "deploy", "reviewer")
        assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
        listed = await call(http, "murmur.ListApprovals", {}, OPERATOR.value)
        callers = [row["caller"] for row in listed["result"]["approvals"]]
        await call(http, "murmur.ApproveTask", {"id": task["id"]}, OPERATOR.value)
        final = await built.tasks.result(task["id"])
    assert error["code"] == -32050 and error["data"][0]["reason"] == "MEMBER_BUSY"
    assert (f"member planner already has {APPROVE_QUEUE_DEFAULT} calls waiting"
            in error["message"])
    assert f"approve_queue: {APPROVE_QUEUE_DEFAULT}" in error["message"]
    assert callers.count("planner") == APPROVE_QUEUE_DEFAULT and callers[-1] == "reviewer"
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_approve_queue_sets_one_callers_share_and_each_decision_frees_a_place() -> None:
    """``approve_queue: 1``: a second call waits only once the first stopped waiting,
    however it stopped (approved, denied, canceled, timed out)."""
    built = door({"planner": EdgeLimits(approve=True, approve_timeout=600.0,
                                        approve_queue=1),
                  "reviewer": EdgeLimits(approve=True, approve_timeout=0.05,
                                         approve_queue=1)})
    async with client(built) as http:
        for decide in ("ApproveTask", "DenyTask", "CancelTask"):
            task = await offer(http, decide)
            error = await refused(http, "planner")
            assert error["code"] == -32050, error
            assert "approve_queue: 1" in error["message"]
            token = mint() if decide == "CancelTask" else OPERATOR.value
            method = decide if decide == "CancelTask" else f"murmur.{decide}"
            await call(http, method, {"id": task["id"]}, token)
            await built.tasks.result(task["id"])
        last = await offer(http, "last")
        timing_out = await offer(http, "soon", "reviewer")
        ended = await built.tasks.result(timing_out["id"])
        again = await offer(http, "again", "reviewer")
    assert last["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert "No approval within" in str(ended["status"])
    assert again["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"


def test_approve_queue_travels_with_the_edge_and_is_bounded_on_the_wire() -> None:
    """The launcher hands a caller's share with its edge's other bounds; a door refuses
    a share below 1 or past the largest (48: one caller never fills the room alone)."""
    limits = EdgeLimits(approve=True, approve_timeout=60.0, approve_queue=2)
    assert limits.wire() == {"approve": True, "approve_timeout": 60.0, "approve_queue": 2}
    assert EdgeLimits.from_wire(limits.wire()) == limits
    assert (limits.approval_share, EdgeLimits(approve=True).approval_share) == (
        2, APPROVE_QUEUE_DEFAULT)
    assert APPROVE_QUEUE_MAX < MAX_WAITING
    for wrong in (0, APPROVE_QUEUE_MAX + 1, True, "2"):
        with pytest.raises(ValueError, match="approve_queue"):
            EdgeLimits.from_wire({"approve": True, "approve_queue": wrong})
