"""In-process fakes for the proxy and call-member tests (no tests here): a small A2A 1.0
JSON-RPC door (plain ASGI), a counting network that records every request it would open,
and a door directory. tests/gateway/proxy/test_proxy_fakes.py checks the fake door itself
answers as A2A 1.0 says, so the other tests' assertions rest on something checked."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Work = Callable[[str], Awaitable[tuple[str, str]]]

COMPLETED = "TASK_STATE_COMPLETED"
FINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
         "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


async def echo(text: str) -> tuple[str, str]:
    await asyncio.sleep(0.01)
    return COMPLETED, f"answer to: {text}"


def slow_echo(seconds: float) -> Work:
    async def work(text: str) -> tuple[str, str]:
        await asyncio.sleep(seconds)
        return COMPLETED, f"answer to: {text}"
    return work


async def forever(text: str) -> tuple[str, str]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def ends_in(state: str, text: str) -> Work:
    async def work(_: str) -> tuple[str, str]:
        return state, text
    return work


@dataclass
class Seen:
    """One HTTP request a fake door received."""

    http_method: str
    path: str
    headers: list[tuple[str, str]]
    body: dict[str, Any] | None

    @property
    def rpc(self) -> str:
        return str((self.body or {}).get("method", ""))

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name.lower()]


@dataclass
class FakeTask:
    id: str
    text: str
    state: str = "TASK_STATE_SUBMITTED"
    answer: str = ""
    runner: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def snapshot(self) -> dict[str, Any]:
        task: dict[str, Any] = {"id": self.id, "contextId": "ctx-" + self.id,
                                "status": {"state": self.state}}
        if self.state == COMPLETED:
            task["artifacts"] = [{"artifactId": "result", "parts": [{"text": self.answer}]}]
        elif self.state in FINAL and self.answer:
            task["status"]["message"] = {"messageId": "m-" + self.id, "role": "ROLE_AGENT",
                                         "parts": [{"text": self.answer}]}
        return task


class FakeDoor:
    """An A2A door: SendMessage (returnImmediately), GetTask, CancelTask, SubscribeToTask.

    ``holds`` is concurrency + queue_depth (``None``: unlimited); past it SendMessage is
    ``-32050`` with ``retryAfterMs`` in a google.rpc.ErrorInfo, as gateway.a2a.jsonrpc sends.
    ``subscribe`` is ``sse`` (a real event stream), ``error`` (a JSON-RPC error) or
    ``broken`` (HTTP 500) or ``truncated`` (the task, then the end of the stream).
    ``http_status`` answers every request with that status and a door error body;
    ``redirect_to`` answers every request with a 307 there.
    """

    def __init__(self, *, holds: int | None = None, retry_after_ms: int = 20,
                 work: Work = echo, subscribe: str = "sse", send_delay: float = 0.0,
                 http_status: int | None = None, redirect_to: str | None = None,
                 reply_message: bool = False) -> None:
        self.holds = holds
        self.retry_after_ms = retry_after_ms
        self.work = work
        self.subscribe = subscribe
        self.send_delay = send_delay
        self.http_status = http_status
        self.redirect_to = redirect_to
        self.reply_message = reply_message
        self.seen: list[Seen] = []
        self.tasks: dict[str, FakeTask] = {}
        self.busy_answers = 0
        #: When set, SendMessage waits for it: an offer held "on the wire".
        self.gate: asyncio.Event | None = None
        self.waiting_at_gate = 0
        self._ids = itertools.count(1)

    def rpcs(self, method: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.rpc == method]

    def running(self) -> int:
        return sum(1 for task in self.tasks.values() if task.state not in FINAL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1"))
                   for k, v in scope["headers"]]
        try:
            document = json.loads(body) if body else None
        except ValueError:
            document = None
        self.seen.append(Seen(scope["method"], scope["path"], headers,
                              document if isinstance(document, dict) else None))
        if self.redirect_to is not None:
            await _respond(send, 307, b"", [(b"location", self.redirect_to.encode())])
            return
        if self.http_status is not None:
            await _json(send, {"error": "peer_not_accepted", "message": "no"},
                        self.http_status)
            return
        if not isinstance(document, dict):
            await _json(send, {"error": "not json-rpc"}, 400)
            return
        await self._rpc(document, send)

    async def _rpc(self, document: dict[str, Any], send: Send) -> None:
        method, params, rid = document.get("method"), document.get("params") or {}, \
            document.get("id")
        if method == "SendMessage":
            await asyncio.sleep(self.send_delay)
            if self.gate is not None:
                self.waiting_at_gate += 1
                await self.gate.wait()
            await _json(send, self._send_message(rid, params))
        elif method == "GetTask":
            task = self.tasks.get(params.get("id"))
            await _json(send, _result(rid, task.snapshot()) if task else _not_found(rid))
        elif method == "CancelTask":
            task = self.tasks.get(params.get("id"))
            if task is None:
                await _json(send, _not_found(rid))
                return
            if task.runner is not None:
                task.runner.cancel()
            if task.state not in FINAL:
                task.state = "TASK_STATE_CANCELED"
                task.changed.set()
            await _json(send, _result(rid, task.snapshot()))
        elif method == "SubscribeToTask":
            await self._subscribe(rid, params, send)
        else:
            await _json(send, _error(rid, -32601, "Method not found"))

    def _send_message(self, rid: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        if self.holds is not None and self.running() >= self.holds:
            self.busy_answers += 1
            info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "MEMBER_BUSY", "domain": "murmur",
                    "metadata": {"retryAfterMs": str(self.retry_after_ms)}}
            return _error(rid, -32050, "member busy", [info])
        text = "".join(part.get("text", "") for part in params["message"]["parts"])
        if self.reply_message:
            return _result(rid, {"message": {"messageId": "r", "role": "ROLE_AGENT",
                                             "parts": [{"text": f"direct: {text}"}]}})
        task = FakeTask(id=f"task-{next(self._ids)}", text=text)
        self.tasks[task.id] = task
        task.runner = asyncio.create_task(self._run(task))
        return _result(rid, {"task": task.snapshot()})

    async def _run(self, task: FakeTask) -> None:
        task.state = "TASK_STATE_WORKING"
        try:
            task.state, task.answer = await self.work(task.text)
        except asyncio.CancelledError:
            task.state = "TASK_STATE_CANCELED"
        finally:
            task.changed.set()

    async def _subscribe(self, rid: Any, params: Mapping[str, Any], send: Send) -> None:
        task = self.tasks.get(params.get("id"))
        if task is None:
            await _json(send, _not_found(rid))
            return
        if self.subscribe == "error":
            await _json(send, _error(rid, -32004, "Unsupported operation"))
            return
        if self.subscribe == "broken":
            await _respond(send, 500, b"oops", [(b"content-type", b"text/plain")])
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await _event(send, _result(rid, {"task": task.snapshot()}))
        if self.subscribe == "truncated":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await task.changed.wait()
        await _event(send, _result(rid, {"statusUpdate": {
            "taskId": task.id, "contextId": "ctx-" + task.id,
            "status": {"state": task.state}}}))
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _result(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def _not_found(rid: Any) -> dict[str, Any]:
    return _error(rid, -32001, "Task not found")


async def _json(send: Send, document: Any, status: int = 200) -> None:
    await _respond(send, status, json.dumps(document).encode(),
                   [(b"content-type", b"application/json")])


async def _event(send: Send, document: Any) -> None:
    chunk = b"data: " + json.dumps(document).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _respond(send: Send, status: int, body: bytes,
                   headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FakeNet(httpx.AsyncBaseTransport):
    """The network as the proxy's inner transport sees it: netloc -> ASGI app. Records
    every request it is handed (each one a connection it would have opened); a netloc
    with no app is a refused connection."""

    def __init__(self, hosts: Mapping[str, Any]) -> None:
        self.opened: list[httpx.Request] = []
        self.closed = False
        self._apps = {netloc: httpx.ASGITransport(app=app) for netloc, app in hosts.items()}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.opened.append(request)
        app = self._apps.get(request.url.netloc.decode("ascii"))
        if app is None:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return await app.handle_async_request(request)

    async def aclose(self) -> None:
        self.closed = True

    def to(self, netloc: str) -> list[httpx.Request]:
        return [r for r in self.opened if r.url.netloc.decode("ascii") == netloc]


class Doors:
    """A DoorDirectory: URLs known now, or arriving later with :meth:`arrive`."""

    def __init__(self, urls: Mapping[str, str]) -> None:
        self.urls = dict(urls)
        self.lookups: list[str] = []
        self._arrived = asyncio.Event()

    async def wait_for(self, name: str, timeout: float) -> str:
        self.lookups.append(name)
        async with asyncio.timeout(timeout):
            while name not in self.urls:
                self._arrived.clear()
                await self._arrived.wait()
        return self.urls[name]

    def arrive(self, name: str, url: str) -> None:
        self.urls[name] = url
        self._arrived.set()
