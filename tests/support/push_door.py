"""A door with push notifications and the callers the push tests use (no tests here):
:func:`push_door` builds one in process (the operator, two declared bearers, formation
tokens), :class:`Agent` holds a task until released or answers at once, :func:`call`
sends one JSON-RPC request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier
from gateway.caller import PUSH_METHODS, TASK_METHODS
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.auth import CI_TOKEN, FORMATION, KEY
from tests.support.door import card_info

OTHER_TOKEN = "other-bearer-token-0123456789abcdef"


class Agent:
    """``hold``: waits for ``release``; anything else: a status, an artifact, an answer."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, run: TaskRun) -> str:
        if run.text == "hold":
            await self.release.wait()
            return "released"
        await run.status("working on it")
        await run.artifact([{"text": "draft"}], name="draft")
        return f"done: {run.text}"


@dataclass
class PushDoor:
    door: Door
    agent: Agent
    operator: OperatorToken
    records: list[dict[str, Any]]

    def client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.door.app), base_url="http://127.0.0.1:8000",
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}, timeout=20)

    def deliveries(self) -> list[dict[str, Any]]:
        return [record for record in self.records if record["event"] == "push_delivery"]


def push_door(*allow: str) -> PushDoor:
    operator = OperatorToken.generate()
    scopes = TASK_METHODS | PUSH_METHODS
    policy = AuthPolicy(authenticated=True, operator=operator,
                        bearers=(DeclaredBearer("ci", CI_TOKEN, scopes),
                                 DeclaredBearer("other", OTHER_TOKEN, scopes)),
                        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
                        member="coder", accept_peer_tasks=True)
    agent = Agent()
    door = build_door(agent, DoorSettings(card=card_info(formation_id=FORMATION),
                                          gate=GateConfig(concurrency=8), push_allow=allow),
                      policy=policy)
    records: list[dict[str, Any]] = []
    door.trace.add_sink(records.append)
    return PushDoor(door, agent, operator, records)


async def call(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
