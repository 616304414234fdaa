"""Calls that wait for the operator (gateway/door/approvals.py) at a real door, in
process: accepted in auth-required and marked so call-member waits, listed, approved,
denied, withdrawn by CancelTask, and bounded in number; member callers cannot decide."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.edge_limits import DoorBounds, EdgeLimits
from gateway.auth.tokens import FormationVerifier
from gateway.door.app import DoorSettings, build_door
from gateway.door.approvals import MAX_WAITING
from gateway.door.tasks import GateConfig, TaskRun
from gateway.proxy.member_rpc import awaits_approval, is_final
from tests.support.auth import FORMATION, KEY, mint
from tests.support.door import card_info, send_params

OPERATOR = OperatorToken.generate()


async def agent(task: TaskRun) -> str:
    return f"deployed {task.text}"


def door() -> Any:
    policy = AuthPolicy(authenticated=True, operator=OPERATOR, member="coder",
                        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
                        accept_peer_tasks=True, bounds=DoorBounds(incoming={
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


async def offer(http: httpx.AsyncClient, text: str) -> dict[str, Any]:
    answer = await call(http, "SendMessage", send_params(text, immediately=True),
                        mint("planner", "coder"))
    task: dict[str, Any] = answer["result"]["task"]
    return task


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


async def test_past_max_waiting_a_call_is_answered_busy() -> None:
    built = door()
    async with client(built) as http:
        for n in range(MAX_WAITING):
            await offer(http, f"n{n}")
        answer = await call(http, "SendMessage", send_params("one more", immediately=True),
                            mint())
    assert answer["error"]["code"] == -32050
