"""Helpers for the tests of real A2A clients over the door's HTTP+JSON binding (no tests
here): a scriptable agent, an ASGI recorder that notes every request's verb and path, an
authenticated door on a real uvicorn socket with the three kinds of credential it takes
(and its gRPC binding on request), and the runner of the @a2a-js/sdk client scripts
(``tests/agents/js/rest_client.mjs``, ``tests/agents/js/grpc_client.mjs``)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.edge_limits import DoorBounds
from gateway.auth.tokens import FormationVerifier
from gateway.caller import TASK_METHODS
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.auth import CI_TOKEN, FORMATION, KEY, mint
from tests.support.door import card_info, serve
from tests.support.third_party import JS_AGENT_DIR

JS_REST_CLIENT = JS_AGENT_DIR / "rest_client.mjs"
JS_GRPC_CLIENT = JS_AGENT_DIR / "grpc_client.mjs"
#: The three credentials every client test runs with.
WHO = ("operator", "bearer", "formation")
#: The member whose door it is, and the member that holds a formation token for it.
CALLEE = "coder"
PEER = "planner"


class Agent:
    """What a task does depends on its text:

    * ``hold:<key>``: waits until a ``release:<key>`` task runs (cancelable meanwhile);
    * ``release:<key>``: lets the ``hold:<key>`` tasks finish ("released <key>");
    * ``ask``: asks "which language?" (input-required), then writes the answer;
    * anything else: a "thinking" status, a two-chunk artifact "essay", "echo: <text>".
    """

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def event(self, key: str) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def release(self, key: str) -> None:
        self.event(key).set()

    async def __call__(self, run: TaskRun) -> str | None:
        text = run.text
        if text.startswith("hold:"):
            key = text[len("hold:"):]
            try:
                await self.event(key).wait()
            except asyncio.CancelledError:
                self.cancelled.append(run.id)
                raise
            return f"released {key}"
        if text.startswith("release:"):
            key = text[len("release:"):]
            self.release(key)
            return f"let {key} go"
        if text == "ask":
            answer = await run.input_required("which language?")
            return f"writing {answer['parts'][0]['text']}"
        await run.status("thinking")
        await run.artifact([{"text": "part one "}], name="essay")
        await run.artifact([{"text": "part two"}], append=True, last_chunk=True)
        return f"echo: {text}"


@dataclass(frozen=True, slots=True)
class Hit:
    """One HTTP request as it reached the door (before DoorAuth)."""

    method: str
    path: str
    query: str
    authorized: bool


@dataclass
class PathRecorder:
    """An ASGI app in front of ``app`` that notes each HTTP request's verb and path."""

    app: Any
    hits: list[Hit] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            authorized = any(name == b"authorization" for name, _ in scope["headers"])
            self.hits.append(Hit(scope["method"], scope["path"],
                                 scope.get("query_string", b"").decode("latin-1"), authorized))
        await self.app(scope, receive, send)

    def routes(self) -> set[tuple[str, str]]:
        return {(hit.method, hit.path) for hit in self.hits}

    def assert_rest_only(self, *expected: tuple[str, str]) -> None:
        """Every ``expected`` (verb, path) was requested, and JSON-RPC never was."""
        routes = self.routes()
        missing = [route for route in expected if route not in routes]
        assert not missing, f"never requested: {missing}; requested: {sorted(routes)}"
        jsonrpc = [hit for hit in self.hits if hit.method == "POST" and not hit.path.strip("/")]
        assert not jsonrpc, f"JSON-RPC was used: {jsonrpc}"


@dataclass
class ServedDoor:
    """A door for member ``coder`` in FORMATION on a real socket, and its tokens."""

    door: Door
    agent: Agent
    url: str
    recorder: PathRecorder
    tokens: dict[str, str]
    #: The gRPC binding's address (``served_door(grpc=True)``), else "".
    grpc_url: str = ""

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@asynccontextmanager
async def served_door(*, public_card: bool = False, grpc: bool = False,
                      bounds: DoorBounds | None = None) -> AsyncIterator[ServedDoor]:
    """An authenticated door (operator token, declared bearer ``ci`` with every task
    method, formation tokens for ``coder``) served by uvicorn behind a PathRecorder, and
    with ``grpc`` on its gRPC binding too."""
    operator = OperatorToken.generate()
    policy = AuthPolicy(
        authenticated=True, operator=operator,
        bearers=(DeclaredBearer("ci", CI_TOKEN, TASK_METHODS),),
        verifier=FormationVerifier(KEY.public_bytes, FORMATION), member=CALLEE,
        accept_peer_tasks=True, public_card=public_card, bounds=bounds,
    )
    agent = Agent()
    settings = DoorSettings(card=card_info(member=CALLEE, formation_id=FORMATION),
                            gate=GateConfig(concurrency=16, queue_depth=16))
    door = build_door(agent, settings, policy=policy)
    recorder = PathRecorder(door.app)
    tokens = {"operator": operator.value, "bearer": CI_TOKEN,
              "formation": mint(caller=PEER, callee=CALLEE)}
    async with serve(recorder) as url:
        door.set_url(url)
        grpc_url = (await door.serve_grpc() or "") if grpc else ""
        try:
            yield ServedDoor(door, agent, url, recorder, tokens, grpc_url)
        finally:
            await door.stop_grpc(0.5)
            door.wind_down("the test is over")


@dataclass
class JsRun:
    """What a client script printed: one JSON object per step, and its stderr."""

    returncode: int
    steps: dict[str, dict[str, Any]]
    order: list[str]
    stderr: str


async def run_js_client(url: str, scenario: str, token: str | None,
                        timeout: float = 30.0, script: Path = JS_REST_CLIENT,
                        binding: str | None = None) -> JsRun:
    """Run an @a2a-js/sdk client script (node from PATH; the REST one unless ``script``
    says otherwise) against ``url``, in ``binding`` when the script takes one. The token
    goes on its stdin, never on argv or in the environment."""
    node = shutil.which("node") or "node"
    process = await asyncio.create_subprocess_exec(
        node, str(script), url, scenario, *([binding] if binding else []),
        cwd=str(JS_AGENT_DIR),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(
            process.communicate(f"{token or ''}\n".encode()), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"{script.name} ran over {timeout}s; stdout: {out!r}; "
                             f"stderr: {err.decode(errors='replace')}") from None
    steps: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for line in out.decode().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        steps[record["step"]] = record
        order.append(record["step"])
    assert process.returncode is not None
    return JsRun(process.returncode, steps, order, err.decode(errors="replace"))
