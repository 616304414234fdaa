"""Shared helpers for the door's tests (no tests here): callers, a shim that plays the
auth middleware's part, JSON-RPC calls, and a real uvicorn server on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from gateway.caller import (
    CALLER_SCOPE_KEY,
    FORMATION_SCOPES,
    OPERATOR_METHODS,
    TASK_METHODS,
    Caller,
    Credential,
)
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.card import CardInfo, Skill
from gateway.door.tasks import AgentFn, GateConfig

BASE_URL = "http://127.0.0.1:8000"
A2A_HEADERS = {"A2A-Version": "1.0"}

OPERATOR = Caller(Credential("operator", "operator", OPERATOR_METHODS), "operator", "trusted")
PUBLIC = Caller(Credential("public", "public", OPERATOR_METHODS), "public", "untrusted")


def member(name: str, trust: str = "untrusted") -> Caller:
    return Caller(Credential("member", f"member:{name}", FORMATION_SCOPES, member=name),
                  "peer", trust)  # type: ignore[arg-type]


def bearer(name: str) -> Caller:
    return Caller(Credential("bearer", f"bearer:{name}", TASK_METHODS), "client", "untrusted")


def card_info(**overrides: Any) -> CardInfo:
    fields: dict[str, Any] = {
        "name": "coder", "description": "Writes code.", "version": "1.2.0",
        "skills": (Skill("code", "Code", "Writes code", ("code",)),),
        "member": "coder", "session_id": "ses_0123", "formation_id": "frm_0456",
        "door_url": BASE_URL,
    }
    fields.update(overrides)
    return CardInfo(**fields)


def make_door(agent: AgentFn, *, gate: GateConfig | None = None, **settings: Any) -> Door:
    return build_door(agent, DoorSettings(card=card_info(), gate=gate or GateConfig(),
                                          **settings))


class CallerShim:
    """Puts a Caller on the scope, as DoorAuth does, so the app can be tested alone.
    The caller is taken from the ``x-test-caller`` header (a key of ``callers``)."""

    def __init__(self, app: Any, callers: dict[str, Caller], default: str = "operator") -> None:
        self.app = app
        self.callers = callers
        self.default = default

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            name = self.default
            for key, value in scope["headers"]:
                if key == b"x-test-caller":
                    name = value.decode()
            scope[CALLER_SCOPE_KEY] = self.callers[name]
        await self.app(scope, receive, send)


CALLERS = {"operator": OPERATOR, "planner": member("planner"), "reviewer": member("reviewer"),
           "ci": bearer("ci"), "public": PUBLIC}


def shimmed(door: Door) -> CallerShim:
    return CallerShim(door.inner_app, CALLERS)


def client_for(app: Any, caller: str | None = None) -> httpx.AsyncClient:
    headers = dict(A2A_HEADERS)
    if caller is not None:
        headers["x-test-caller"] = caller
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL,
                             headers=headers)


async def rpc(client: httpx.AsyncClient, method: str, params: dict[str, Any] | None = None,
              *, request_id: int | str = 1, **kwargs: Any) -> dict[str, Any]:
    response = await client.post("/", json={"jsonrpc": "2.0", "id": request_id,
                                            "method": method, "params": params or {}},
                                 **kwargs)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def user_message(text: str, **extra: Any) -> dict[str, Any]:
    return {"messageId": f"m-{text[:8]}-{id(extra)}", "role": "ROLE_USER",
            "parts": [{"text": text}], **extra}


def send_params(text: str, *, immediately: bool = False, **message: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": user_message(text, **message)}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return params


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1, a free port; yields the base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def sse_results(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC objects of an SSE response, one per event."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])
