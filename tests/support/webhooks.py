"""Webhooks for the push notification tests (no tests here): one that answers every event
and lets a test wait for what it received, and one that accepts connections and never
answers (a hanging receiver), each served on loopback in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from tests.support.door import serve


class Webhook:
    """An ASGI receiver answering 204 to every POST; ``bodies`` in the order received."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""
        self._changed = asyncio.Condition()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        self.bodies.append(json.loads(body) if body else {})
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate: Callable[[list[dict[str, Any]]], bool],
                    timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until ``predicate(bodies)`` holds."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self.bodies))

    def ended(self, task_id: str) -> bool:
        """Whether this webhook got ``task_id``'s last event."""
        return any(body.get("statusUpdate", {}).get("taskId") == task_id
                   and body["statusUpdate"]["status"]["state"] in (
                       "TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED")
                   for body in self.bodies)


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook()
    async with serve(hook) as url:
        hook.url = url
        yield hook


class Hanging:
    """A receiver that accepts every connection, reads what it is sent, and never
    answers: the door's try waits for its timeout."""

    def __init__(self) -> None:
        self.connections = 0
        self.url = ""
        self._writers: list[asyncio.StreamWriter] = []
        self._changed = asyncio.Condition()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        async with self._changed:
            self._changed.notify_all()
        with contextlib.suppress(Exception):
            await reader.read()          # until the door gives up and closes

    async def accepted(self, count: int, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until ``count`` connections were accepted."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.connections >= count)

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


@contextlib.asynccontextmanager
async def hanging(host: str = "127.0.0.1") -> AsyncIterator[Hanging]:
    hook = Hanging()
    server = await asyncio.start_server(hook.handle, host, 0)
    port = server.sockets[0].getsockname()[1]
    hook.url = f"http://{host}:{port}"
    try:
        yield hook
    finally:
        server.close()
        hook.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
