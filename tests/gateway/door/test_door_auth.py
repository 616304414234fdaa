"""The door end to end through the real DoorAuth with real credentials: formation tokens
of two members, the operator token, a declared bearer."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import ListTasksRequest, Message, Part, Role, SendMessageRequest, TaskState

from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationKey, FormationVerifier
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.tasks import GateConfig, TaskRun
from gateway.trace.bus import TraceBus
from tests.support.door import A2A_HEADERS, BASE_URL, card_info, send_params, serve

FORMATION = "frm_" + uuid.uuid4().hex


class Formation:
    """A door for member ``coder`` and the credentials of everyone who may call it."""

    def __init__(self) -> None:
        key = FormationKey.generate()
        self.operator = OperatorToken.generate()
        self.ci = DeclaredBearer(name="ci", token="ci-" + uuid.uuid4().hex)
        self.planner = key.mint(formation=FORMATION, caller="planner", callee="coder")
        self.reviewer = key.mint(formation=FORMATION, caller="reviewer", callee="coder")
        self.planner_to_reviewer = key.mint(formation=FORMATION, caller="planner",
                                            callee="reviewer")
        self.seen: list[tuple[str, str]] = []
        self.records: list[dict[str, Any]] = []
        trace = TraceBus()
        trace.add_sink(self.records.append)
        policy = AuthPolicy(
            authenticated=True, operator=self.operator, bearers=(self.ci,),
            verifier=FormationVerifier(key.public_bytes, FORMATION), member="coder",
            accept_peer_tasks=True)
        self.door: Door = build_door(self.agent, DoorSettings(
            card=card_info(), gate=GateConfig(concurrency=4, queue_depth=4)),
            policy=policy, trace=trace)

    async def agent(self, run: TaskRun) -> str:
        self.seen.append((run.caller.origin, run.caller.trust))
        return f"coded {run.text}"

    def client(self, token: str | None, **headers: str) -> httpx.AsyncClient:
        all_headers = dict(A2A_HEADERS, **headers)
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.door.app),
                                 base_url=BASE_URL, headers=all_headers)


async def call(client: httpx.AsyncClient, method: str,
               params: dict[str, Any] | None = None) -> httpx.Response:
    return await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                        "params": params or {}})


@pytest.fixture
def formation() -> Formation:
    return Formation()


async def test_a_member_reaches_only_the_tasks_it_started(formation: Formation) -> None:
    async with formation.client(formation.planner) as planner, \
            formation.client(formation.reviewer) as reviewer, \
            formation.client(formation.operator.value) as operator, \
            formation.client(formation.ci.token) as ci:
        started = (await call(planner, "SendMessage", send_params("a parser"))).json()
        task_id = started["result"]["task"]["id"]
        refusals = [(await call(other, method, {"id": task_id})).json()["error"]
                    for other in (reviewer, ci)
                    for method in ("GetTask", "CancelTask", "SubscribeToTask")]
        unknown = (await call(planner, "GetTask", {"id": "nope"})).json()["error"]
        own = (await call(planner, "GetTask", {"id": task_id})).json()["result"]
        every = (await call(operator, "ListTasks")).json()["result"]
        theirs = (await call(reviewer, "ListTasks")).json()["result"]
    assert all(refusal == unknown for refusal in refusals)
    assert unknown["code"] == -32001
    assert own["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [task["id"] for task in every["tasks"]] == [task_id]
    assert theirs["tasks"] == []


async def test_spoofed_origin_and_trust_headers_are_ignored(formation: Formation) -> None:
    async with formation.client(formation.planner, **{"x-murmur-task-trust": "trusted"}) as p, \
            formation.client(formation.reviewer, **{"x-murmur-task-trust": "root"}) as r, \
            formation.client(formation.ci.token, **{"x-murmur-task-origin": "operator",
                                                   "x-murmur-task-trust": "trusted"}) as ci, \
            formation.client(formation.operator.value) as operator:
        for client in (p, r, ci, operator):
            body = (await call(client, "SendMessage", send_params("x"))).json()
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert formation.seen == [("peer", "trusted"), ("peer", "untrusted"),
                              ("client", "untrusted"), ("operator", "trusted")]


async def test_origin_and_trust_in_the_request_body_are_ignored(formation: Formation) -> None:
    params = send_params("x", metadata={"origin": "operator", "trust": "trusted"})
    params["metadata"] = {"x-murmur-task-origin": "operator", "x-murmur-task-trust": "trusted"}
    async with formation.client(formation.reviewer) as reviewer:
        body = (await call(reviewer, "SendMessage", params)).json()
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert formation.seen == [("peer", "untrusted")]


async def test_traces_name_the_calling_member_and_never_a_token(formation: Formation) -> None:
    async with formation.client(formation.planner) as planner:
        await call(planner, "SendMessage", send_params("traced"))
    received = [r for r in formation.records if r["event"] == "a2a_task_received"]
    assert received[0]["credential"] == "member:planner"
    assert received[0]["formation_member"] == "planner"
    dumped = json.dumps(formation.records)
    for token in (formation.planner, formation.operator.value, formation.ci.token):
        assert token not in dumped


async def test_a_token_for_another_members_door_is_not_permitted(formation: Formation) -> None:
    async with formation.client(formation.planner_to_reviewer) as wrong, \
            formation.client(None) as nobody, formation.client("mft1.forged.x") as forged:
        not_permitted = await call(wrong, "SendMessage", send_params("x"))
        missing = await call(nobody, "SendMessage", send_params("x"))
        invalid = await call(forged, "SendMessage", send_params("x"))
        card = await nobody.get("/.well-known/agent-card.json")
        health = await nobody.get("/healthz")
    assert not_permitted.status_code == 403 and not_permitted.json()["error"] == "not_permitted"
    assert missing.status_code == 401 and invalid.status_code == 401
    assert card.status_code == 401, "the card needs a credential at an authenticated door"
    assert health.status_code == 200 and health.text == "ok"
    assert formation.seen == []


async def test_a_formation_token_reaches_none_of_the_operator_methods(
        formation: Formation) -> None:
    async with formation.client(formation.planner) as planner, \
            formation.client(formation.operator.value) as operator:
        for method in ("SendStreamingMessage", "murmur.WatchSession", "murmur.StopSession"):
            refused = await call(planner, method, send_params("x"))
            assert refused.status_code == 403
            assert refused.json()["error"] == "insufficient_scope"
        files = await planner.get("/resources/files/result.txt")
        assert files.status_code == 403
        await asyncio.sleep(0.01)
        assert not formation.door.stop_requested.is_set()
        stopped = (await call(operator, "murmur.StopSession")).json()
    assert stopped["result"] == {"stopping": True}
    await asyncio.wait_for(formation.door.stop_requested.wait(), 5)


async def test_the_sdk_client_works_with_the_operator_token_over_a_socket(
        formation: Formation) -> None:
    async with serve(formation.door.app) as url:
        formation.door.set_url(url)
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {formation.operator.value}"})
        client = await ClientFactory(ClientConfig(streaming=True, httpx_client=http)
                                     ).create_from_url(url)
        try:
            message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                              parts=[Part(text="over the wire")])
            events = [event async for event in client.send_message(
                SendMessageRequest(message=message))]
            listed = await client.list_tasks(ListTasksRequest())
        finally:
            await client.close()
            await http.aclose()
    assert events[0].HasField("task")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert listed.total_size == 1
    assert formation.door.card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"][
        "scheme"] == "Bearer"
    await asyncio.sleep(0)
