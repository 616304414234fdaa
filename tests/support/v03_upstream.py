"""An A2A 0.3 upstream as BeeAI's (a2a-sdk 0.3) answers, for the relay's tests (no tests
here): JSON-RPC 0.3 at ``/`` behind a 0.3 card, in the test's event loop, written by hand
because a2a-sdk 1.x (the test venv's) serves 0.3 only through its own 1.0 handler, which
always begins a stream with the Task. This one does what 0.3 allowed and A2A 1.0 does not:

- ``message/stream`` begins with a ``status-update`` (``submitted``), then ``working``,
  an ``artifact-update`` and ``completed`` (``final: true``), :data:`STEP_S` apart;
- ``tasks/resubscribe`` begins with the next ``status-update`` of the live task;
- ``tasks/cancel`` of an ended task is ``-32002`` with ``data: null`` (no ErrorInfo), and
  ``tasks/get`` of an unknown one ``-32001`` the same way;
- ``message/send`` answers the Task (``blocking: false``: at once, while it runs).

A task's text picks how long it works: ``slow: N`` waits N seconds before its answer.
:func:`running_v03_upstream` serves it on a free port and yields the :class:`V03Upstream`
(its URL, its tasks, what it was asked); :func:`gateway_before_v03` puts a gateway
member's door in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.door import BASE_URL, serve
from tests.support.upstream import GatewayFormation, Recorder, gateway_formation

#: The pause between two steps of a task.
STEP_S = 0.05
TERMINAL = ("completed", "canceled", "failed", "rejected")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class _Task:
    """One task: its 0.3 Task object and the queues of its open streams."""

    task: dict[str, Any]
    streams: list[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None

    @property
    def state(self) -> str:
        return str(self.task["status"]["state"])

    def emit(self, event: dict[str, Any]) -> None:
        for queue in self.streams:
            queue.put_nowait(event)
        if event.get("final"):
            for queue in self.streams:
                queue.put_nowait(None)


@dataclass
class V03Upstream:
    """The upstream's tasks and every JSON-RPC method it was asked, in order."""

    url: str = ""
    tasks: dict[str, _Task] = field(default_factory=dict)
    methods: list[str] = field(default_factory=list)

    def card(self) -> dict[str, Any]:
        return {"protocolVersion": "0.3.0", "name": "beeai-like", "version": "0.3.0",
                "description": "An A2A 0.3 agent as BeeAI serves one (tests).",
                "url": self.url + "/", "preferredTransport": "JSONRPC",
                "capabilities": {"streaming": True},
                "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "chat", "name": "Chat", "description": "Answers.",
                            "tags": ["test"]}]}

    # --- a task's life -------------------------------------------------------------

    def start(self, message: dict[str, Any]) -> _Task:
        task_id = uuid.uuid4().hex
        context_id = message.get("contextId") or uuid.uuid4().hex
        kept = {**message, "taskId": task_id, "contextId": context_id}
        record = _Task({"kind": "task", "id": task_id, "contextId": context_id,
                        "status": {"state": "submitted", "timestamp": _now()},
                        "history": [kept]})
        self.tasks[task_id] = record
        return record

    def run(self, record: _Task, text: str) -> None:
        record.runner = asyncio.get_running_loop().create_task(self._work(record, text))

    async def _work(self, record: _Task, text: str) -> None:
        seconds = float(text.split(":", 1)[1]) if text.startswith("slow:") else 0.0
        await asyncio.sleep(STEP_S)
        self._state(record, "working", "on it")
        await asyncio.sleep(STEP_S + seconds)
        artifact = {"artifactId": uuid.uuid4().hex, "name": "answer",
                    "parts": [{"kind": "text", "text": f"heard: {text}"}]}
        record.task.setdefault("artifacts", []).append(artifact)
        record.emit({"kind": "artifact-update", "taskId": record.task["id"],
                     "contextId": record.task["contextId"], "artifact": artifact,
                     "append": False, "lastChunk": True})
        await asyncio.sleep(STEP_S)
        self._state(record, "completed", None)

    def _state(self, record: _Task, state: str, text: str | None) -> None:
        status: dict[str, Any] = {"state": state, "timestamp": _now()}
        if text is not None:
            status["message"] = {"kind": "message", "messageId": uuid.uuid4().hex,
                                 "role": "agent", "parts": [{"kind": "text", "text": text}],
                                 "taskId": record.task["id"],
                                 "contextId": record.task["contextId"]}
        record.task["status"] = status
        record.emit({"kind": "status-update", "taskId": record.task["id"],
                     "contextId": record.task["contextId"], "status": status,
                     "final": state in TERMINAL})

    # --- the JSON-RPC methods ------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        body = await request.json()
        method, params, rpc_id = body["method"], body.get("params") or {}, body.get("id")
        self.methods.append(method)
        if method == "message/stream":
            message = params["message"]
            record = self.start(message)
            queue = self._listen(record)
            record.emit({"kind": "status-update", "taskId": record.task["id"],
                         "contextId": record.task["contextId"],
                         "status": record.task["status"], "final": False})
            self.run(record, _text(message))
            return _stream(rpc_id, queue)
        if method == "message/send":
            message = params["message"]
            record = self.start(message)
            self.run(record, _text(message))
            if (params.get("configuration") or {}).get("blocking", True):
                assert record.runner is not None
                await record.runner
            return _result(rpc_id, record.task)
        found = self.tasks.get(str(params.get("id")))
        if found is None:
            return _error(rpc_id, -32001, "Task not found")
        if method == "tasks/get":
            return _result(rpc_id, found.task)
        if method == "tasks/cancel":
            if found.state in TERMINAL:
                return _error(rpc_id, -32002, "Task cannot be canceled")
            if found.runner is not None:
                found.runner.cancel()
            self._state(found, "canceled", None)
            return _result(rpc_id, found.task)
        if method == "tasks/resubscribe":
            if found.state in TERMINAL:
                return _error(rpc_id, -32004, "This operation is not supported")
            return _stream(rpc_id, self._listen(found))
        return _error(rpc_id, -32601, "Method not found")

    @staticmethod
    def _listen(record: _Task) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        record.streams.append(queue)
        return queue

    def app(self) -> Starlette:
        async def card(_: Request) -> Response:
            return JSONResponse(self.card())

        return Starlette(routes=[Route("/.well-known/agent-card.json", card),
                                 Route("/", self.endpoint, methods=["POST"])])


def _text(message: dict[str, Any]) -> str:
    return "".join(str(part.get("text", "")) for part in message.get("parts") or ())


def _result(rpc_id: Any, result: Any) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def _error(rpc_id: Any, code: int, message: str) -> Response:
    # As a2a-sdk 0.3 writes an error: no ErrorInfo, ``data`` null.
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id,
                         "error": {"code": code, "message": message, "data": None}})


def _stream(rpc_id: Any, queue: asyncio.Queue[dict[str, Any] | None]) -> Response:
    async def events() -> AsyncIterator[bytes]:
        while (event := await queue.get()) is not None:
            document = {"jsonrpc": "2.0", "id": rpc_id, "result": event}
            yield f"data: {json.dumps(document)}\n\n".encode()

    return StreamingResponse(events(), media_type="text/event-stream")


@contextlib.asynccontextmanager
async def running_v03_upstream() -> AsyncIterator[V03Upstream]:
    """The upstream served by uvicorn on 127.0.0.1 at a free port, in this loop."""
    upstream = V03Upstream()
    async with serve(upstream.app()) as url:
        upstream.url = url
        try:
            yield upstream
        finally:
            for record in upstream.tasks.values():
                if record.runner is not None:
                    record.runner.cancel()
                for queue in record.streams:
                    queue.put_nowait(None)


@contextlib.asynccontextmanager
async def gateway_before_v03(*, grpc: bool = False
                             ) -> AsyncIterator[tuple[GatewayFormation, V03Upstream, str]]:
    """The door of gateway member ``coder`` (tests/support/upstream.py) in front of a
    running :class:`V03Upstream`; with ``grpc``, its gRPC binding served too (its
    address third, else ``""``)."""
    async with running_v03_upstream() as upstream:
        formation = await gateway_formation(upstream.url, Recorder())
        formation.door.set_url(BASE_URL)
        address = (await formation.door.serve_grpc() or "") if grpc else ""
        try:
            yield formation, upstream, address
        finally:
            await formation.door.stop_grpc(0.5)
            await formation.door.aclose()
