"""A third-party A2A 1.0 server for the relay's tests (no tests here): a2a-sdk's own
JSON-RPC server, run by uvicorn on 127.0.0.1 inside the test's event loop, with a
recorder in front that keeps every request it got.

In this order: what a task does (:class:`Behaviours`, picked by the text of the message
that starts it), the executor, the card, the recorder, the app, and
:func:`running_upstream`, which serves it all on a free port and yields
``(base_url, recorder)``; last, the door under test in front of it
(:class:`GatewayFormation`: a gateway member ``coder`` behind the real DoorAuth, with the
operator's token and the formation tokens of two callers, ``planner`` and ``reviewer``).

What a task does, by its first message's text:

- ``stream: ...``  three WORKING status updates "chunk 1..3", :data:`CHUNK_INTERVAL_S`
  apart, then an artifact and COMPLETED;
- ``slow: N``      WORKING, then N seconds of silence (cancelable all the while), then
  an artifact and COMPLETED;
- ``input: ...``   INPUT_REQUIRED "say more"; the follow-up on the same task completes it;
- ``fail: ...``    FAILED with a message;
- anything else    an artifact "heard: <text>" and COMPLETED.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentCardSignature,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationKey, FormationVerifier
from gateway.door.app import Door, DoorSettings
from gateway.door.card import CardInfo
from gateway.door.tasks import GateConfig
from gateway.relay.client import UpstreamClient, fetch_card, new_session
from gateway.relay.interfaces import UpstreamInterface, upstream_interface
from gateway.relay.tasks import RelayTasks, build_gateway_door
from gateway.trace.bus import TraceBus
from tests.support.door import A2A_HEADERS, BASE_URL, card_info

CHUNK_INTERVAL_S = 0.3
STARTUP_WAIT_S = 5.0
SHUTDOWN_WAIT_S = 5.0
RPC_PATH = "/"
CARD_PATH = "/.well-known/agent-card.json"
UPSTREAM_NAME = "upstream-coder"
UPSTREAM_DESCRIPTION = "A third-party a2a-sdk agent behind the relay (tests)."
UPSTREAM_VERSION = "3.1.4"
UPSTREAM_PROVIDER = {"organization": "relay tests", "url": "https://example.invalid/relay"}
UPSTREAM_SKILL_ID = "scripted"
#: The ``binding`` of :func:`running_upstream` that serves A2A 0.3 (JSON-RPC) only.
V03 = "JSONRPC 0.3"


# --------------------------------------------------------------------- behaviours


class Behaviours:
    """One coroutine per kind of task; each ends the task, or leaves it interrupted."""

    @staticmethod
    def message(updater: TaskUpdater, text: str) -> Any:
        return updater.new_agent_message([Part(text=text)])

    async def answer(self, updater: TaskUpdater, text: str) -> None:
        await updater.add_artifact([Part(text=text)], name="answer")
        await updater.complete()

    async def default(self, updater: TaskUpdater, text: str) -> None:
        await self.answer(updater, f"heard: {text}")

    async def stream(self, updater: TaskUpdater, _rest: str) -> None:
        for number in (1, 2, 3):
            await updater.start_work(self.message(updater, f"chunk {number}"))
            await asyncio.sleep(CHUNK_INTERVAL_S)
        await self.answer(updater, "streamed 3 chunks")

    async def slow(self, updater: TaskUpdater, rest: str) -> None:
        seconds = float(rest)
        await updater.start_work(self.message(updater, f"working {seconds:g} s"))
        await asyncio.sleep(seconds)  # CancelTask cancels this sleep
        await self.answer(updater, f"worked {seconds:g} s")

    async def ask_for_input(self, updater: TaskUpdater, _rest: str) -> None:
        await updater.requires_input(self.message(updater, "say more"))

    async def follow_up(self, updater: TaskUpdater, text: str) -> None:
        await self.answer(updater, f"got: {text}")

    async def fail(self, updater: TaskUpdater, rest: str) -> None:
        await updater.failed(self.message(updater, f"failed: {rest.strip()}"))

    def pick(self, text: str) -> tuple[Callable[[TaskUpdater, str], Awaitable[None]], str]:
        prefixes = {"stream:": self.stream, "slow:": self.slow, "input:": self.ask_for_input,
                    "fail:": self.fail}
        stripped = text.strip()
        for prefix, behaviour in prefixes.items():
            if stripped.startswith(prefix):
                return behaviour, stripped[len(prefix):].strip()
        return self.default, text


# --------------------------------------------------------------------- executor


class ScriptedExecutor(AgentExecutor):
    """Runs the behaviour the first message picks; a follow-up of an INPUT_REQUIRED task
    completes it."""

    def __init__(self) -> None:
        self.behaviours = Behaviours()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:  # the handler normally stores the task before calling us
            task = Task(id=context.task_id, context_id=context.context_id,
                        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self.behaviours.follow_up(updater, text)
            return
        behaviour, rest = self.behaviours.pick(text)
        try:
            await behaviour(updater, rest)
        except ValueError as bad_input:
            await updater.failed(Behaviours.message(updater, f"bad input: {bad_input}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The handler cancels execute()'s asyncio task right after this returns.
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel(Behaviours.message(updater, "canceled"))


# --------------------------------------------------------------------- card


def agent_card(port: int, binding: str = "JSONRPC") -> AgentCard:
    """The upstream's card, with a signature the door must drop (it signs another card);
    its one interface is ``binding`` (``JSONRPC`` at ``/``, or ``HTTP+JSON`` at the root)."""
    url = f"http://127.0.0.1:{port}{RPC_PATH if binding == 'JSONRPC' else ''}"
    return AgentCard(
        name=UPSTREAM_NAME,
        description=UPSTREAM_DESCRIPTION,
        version=UPSTREAM_VERSION,
        supported_interfaces=[AgentInterface(url=url, protocol_binding=binding,
                                             protocol_version="1.0")],
        provider=AgentProvider(**UPSTREAM_PROVIDER),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=UPSTREAM_SKILL_ID, name="Scripted replies",
                           description="Answers by the prefix of the first message.",
                           tags=["test"], examples=["hello", "stream: go", "slow: 2"])],
        signatures=[AgentCardSignature(protected="eyJhbGciOiJFUzI1NiJ9",
                                       signature="c2lnbmVkLWJ5LXRoZS11cHN0cmVhbQ")],
    )


# --------------------------------------------------------------------- recorder


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request the upstream got: its HTTP method and path, every header (names
    lower-cased, in order), and for a JSON-RPC call its method, params and id."""

    http_method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    rpc_method: str | None = None
    params: Any = None
    rpc_id: Any = None

    def header(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name.lower()]


@dataclass
class Recorder:
    """ASGI middleware in front of the upstream: keeps each request (body read whole and
    handed on unchanged) before the app sees it."""

    app: Any = None
    requests: list[RecordedRequest] = field(default_factory=list)

    def rpc(self, method: str | None = None) -> list[RecordedRequest]:
        """The JSON-RPC calls it got (of ``method`` only, when given)."""
        return [request for request in self.requests if request.rpc_method is not None
                and (method is None or request.rpc_method == method)]

    def rpc_methods(self) -> list[str]:
        return [str(request.rpc_method) for request in self.rpc()]

    def asked_about(self, task_id: str) -> list[RecordedRequest]:
        """The calls that named ``task_id``: as ``params.id`` or as a message's taskId."""
        found = []
        for request in self.rpc():
            params = request.params if isinstance(request.params, dict) else {}
            message = params.get("message")
            if params.get("id") == task_id or (
                    isinstance(message, dict) and message.get("taskId") == task_id):
                found.append(request)
        return found

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
        rpc_method, params, rpc_id = _rpc_of(body) if scope["method"] == "POST" \
            else (None, None, None)
        self.requests.append(RecordedRequest(
            scope["method"], scope["path"],
            tuple((k.decode("latin-1").lower(), v.decode("latin-1"))
                  for k, v in scope["headers"]),
            rpc_method, params, rpc_id))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        await self.app(scope, replay, send)


def _rpc_of(body: bytes) -> tuple[str | None, Any, Any]:
    """A JSON-RPC call's method, params and id (all None for anything else)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None, None, None
    if isinstance(value, dict) and isinstance(value.get("method"), str):
        return value["method"], value.get("params"), value.get("id")
    return None, None, None


# --------------------------------------------------------------------- app and server


def v03_card(port: int) -> dict[str, Any]:
    """The upstream's card as an A2A 0.3 server writes one: a top-level ``url`` and
    ``preferredTransport``, ``protocolVersion`` 0.3.0, and no ``supportedInterfaces``."""
    return {"protocolVersion": "0.3.0", "name": UPSTREAM_NAME,
            "description": UPSTREAM_DESCRIPTION, "version": UPSTREAM_VERSION,
            "url": f"http://127.0.0.1:{port}{RPC_PATH}", "preferredTransport": "JSONRPC",
            "provider": UPSTREAM_PROVIDER,
            "capabilities": {"streaming": True, "pushNotifications": True},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": UPSTREAM_SKILL_ID, "name": "Scripted replies",
                        "description": "Answers by the prefix of the first message.",
                        "tags": ["test"], "security": [{"upstream-key": []}]}]}


def build_app(port: int, binding: str = "JSONRPC") -> Recorder:
    """The SDK's server speaking one binding only: its JSON-RPC routes, its REST ones, or
    (``binding`` :data:`V03`) A2A 0.3 JSON-RPC behind a 0.3 card (a2a-sdk's own 0.3
    compatibility; the recorder shows the 0.3 method names the door sent)."""
    card = agent_card(port, "JSONRPC" if binding == V03 else binding)
    handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(),
                                    task_store=InMemoryTaskStore(), agent_card=card)
    if binding == V03:
        legacy = v03_card(port)

        async def card_route(_: Any) -> JSONResponse:
            return JSONResponse(legacy)

        return Recorder(Starlette(routes=[
            Route(CARD_PATH, card_route),
            *create_jsonrpc_routes(handler, rpc_url=RPC_PATH, enable_v0_3_compat=True)]))
    served = (create_jsonrpc_routes(handler, rpc_url=RPC_PATH) if binding == "JSONRPC"
              else create_rest_routes(handler))
    return Recorder(Starlette(routes=create_agent_card_routes(card) + served))


class _InLoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: inside a test, Ctrl-C is pytest's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def running_upstream(binding: str = "JSONRPC") -> AsyncIterator[tuple[str, Recorder]]:
    """The upstream served on 127.0.0.1 at a free port, in this event loop; yields its
    base URL (``http://127.0.0.1:PORT``, the card at :data:`CARD_PATH`, JSON-RPC at
    ``/``) and its recorder. Startup is bounded by :data:`STARTUP_WAIT_S`; on the way
    out the server is stopped (open connections get 1 s, the whole shutdown
    :data:`SHUTDOWN_WAIT_S`)."""
    sock = _loopback_socket()
    port = int(sock.getsockname()[1])
    recorder = build_app(port, binding)
    config = uvicorn.Config(recorder, log_level="error", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1)
    server = _InLoopServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="test-upstream")
    try:
        async with asyncio.timeout(STARTUP_WAIT_S):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("the test upstream ended before it started")
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}", recorder
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, SHUTDOWN_WAIT_S)
        finally:
            sock.close()


# --------------------------------------------------------------------- the door in front

FORMATION = "frm_0190c0de00007000800000000000f00d"
#: The manifest's ``headers``: what the door sends its upstream on every request.
MANIFEST_HEADERS = {"X-Api-Key": "manifest-key-for-the-upstream"}


class GatewayFormation:
    """The door of gateway member ``coder`` in front of an upstream, and the credentials
    of everyone who may call it: the operator, and two formation members (``planner``
    and ``reviewer``) with tokens for ``coder``; ``planner_to_reviewer`` is a valid
    token for another member. Every trace record lands in ``records``."""

    def __init__(self, upstream_url: str, recorder: Recorder, door: Door,
                 policy: AuthPolicy, key: FormationKey, operator: OperatorToken,
                 records: list[dict[str, Any]]) -> None:
        self.upstream_url = upstream_url
        self.recorder = recorder
        self.door = door
        self.policy = policy
        self.operator = operator.value
        self.planner = key.mint(formation=FORMATION, caller="planner", callee="coder")
        self.reviewer = key.mint(formation=FORMATION, caller="reviewer", callee="coder")
        self.planner_to_reviewer = key.mint(formation=FORMATION, caller="planner",
                                            callee="reviewer")
        self.records = records

    def client(self, token: str | None, base_url: str = BASE_URL,
               **headers: str) -> httpx.AsyncClient:
        """A caller of the door in-process (``base_url``: a served door's URL instead)."""
        every = dict(A2A_HEADERS, **headers)
        if token is not None:
            every["Authorization"] = f"Bearer {token}"
        if base_url != BASE_URL:
            return httpx.AsyncClient(base_url=base_url, headers=every, timeout=10)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.door.app),
                                 base_url=base_url, headers=every, timeout=10)

    @property
    def relay(self) -> RelayTasks:
        """The door's relay (what it knows of each task)."""
        tasks = self.door.tasks
        assert isinstance(tasks, RelayTasks)
        return tasks

    def events(self, name: str) -> list[dict[str, Any]]:
        return [record for record in self.records if record["event"] == name]


def formation_policy(key: FormationKey, operator: OperatorToken) -> AuthPolicy:
    """What the door of ``coder`` accepts: the operator and formation tokens for it."""
    return AuthPolicy(authenticated=True, operator=operator,
                      verifier=FormationVerifier(key.public_bytes, FORMATION),
                      member="coder", accept_peer_tasks=True)


async def upstream_card(upstream_url: str) -> tuple[dict[str, Any], UpstreamInterface]:
    """The upstream's card as the runtime reads it, and the interface it speaks."""
    card_url = upstream_url + CARD_PATH
    session = new_session()
    try:
        card = await fetch_card(session, card_url, {})
    finally:
        await session.close()
    return card, upstream_interface(card, card_url)


async def gateway_formation(upstream_url: str, recorder: Recorder, *,
                            gate: GateConfig | None = None,
                            rpc_url: str | None = None,
                            door_card: CardInfo | None = None) -> GatewayFormation:
    """The door of ``coder`` in front of the upstream at ``upstream_url`` (``rpc_url``:
    relay to that address instead of the card's, e.g. one nothing listens on;
    ``door_card``: the door's own card info, else the usual). The caller closes it with ``await
    formation.door.aclose()``."""
    card, interface = await upstream_card(upstream_url)
    key, operator = FormationKey.generate(), OperatorToken.generate()
    policy = formation_policy(key, operator)
    records: list[dict[str, Any]] = []
    trace = TraceBus()
    trace.add_sink(records.append)
    if rpc_url is not None:
        interface = replace(interface, url=rpc_url)
    client = UpstreamClient(interface.url, member="coder", headers=MANIFEST_HEADERS,
                            framing=interface.framing())
    settings = DoorSettings(card=door_card or card_info(),
                            gate=gate or GateConfig(concurrency=8, queue_depth=0))
    door = build_gateway_door(client, card, settings, policy=policy, trace=trace)
    return GatewayFormation(upstream_url, recorder, door, policy, key, operator, records)


@contextlib.asynccontextmanager
async def gateway_member(gate: GateConfig | None = None, binding: str = "JSONRPC",
                         card: CardInfo | None = None) -> AsyncIterator[GatewayFormation]:
    """An upstream running (speaking ``binding`` only), and the door of ``coder`` in front
    of it (closed after)."""
    async with running_upstream(binding) as (upstream_url, recorder):
        formation = await gateway_formation(upstream_url, recorder, gate=gate, door_card=card)
        try:
            yield formation
        finally:
            await formation.door.aclose()
