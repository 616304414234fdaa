"""The uvicorn server a member's door runs on: :class:`DoorServer`.

uvicorn is a dependency whose internals this subclass leans on (``main_loop``,
``on_tick``, ``shutdown``, ``server_state``, ``lifespan``, ``force_exit``). It was written
and tested against uvicorn 0.55, and ``pyproject.toml`` pins ``>=0.55,<0.56``: a newer
uvicorn is taken only after this module is checked against it. :meth:`DoorServer.for_app`
is the one place the door's uvicorn settings are chosen, the door's bounds under floods
included (:class:`~launcher.member.http_limits.DoorLimits`).

In order: the server, its settings (:meth:`DoorServer.for_app`), what it does while it
serves (the log limits of :mod:`launcher.member.log_limits` around ``serve``; at each
tick the Date header, the sweep of overdue connections and the log counts), and its
short shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import uvicorn

from gateway.types import ASGIApp
from launcher.member.http_limits import (
    ConnectionBook,
    DoorLimits,
    accept_batch,
    connection_cap,
    protocol_for,
)
from launcher.member.log_limits import RateLimit, limited_logs

#: How often the door's idle server wakes (to refresh its Date header), and how often,
#: once stopping, it looks at its connections. uvicorn's own 0.1 s polls cost every
#: member of a formation 0.3 s of its wind-down, and ten wake-ups a second while idle.
#: Each wake-up also sweeps overdue connections: a tick is at most a quarter of the
#: head and body deadlines, so one is kept to within half of itself (two ticks).
_TICK_SECONDS = 1.0
_STOP_POLL_SECONDS = 0.01
#: The kernel's queue of connections not yet accepted (uvicorn's default backlog).
_LISTEN_QUEUE = 2048


class DoorServer(uvicorn.Server):
    """uvicorn without its signal handlers (the member's own decide how it ends), which
    stops as soon as it is asked to.

    uvicorn looks at ``should_exit`` every 0.1 s, then sleeps 0.1 s more after asking
    its connections to close and looks at them every 0.1 s: up to 0.3 s for every member
    of a formation that winds down. Here :meth:`stop` wakes the loop at once and the
    connections are looked at every 10 ms. What is closed, in which order, and the
    bound on the wait (``timeout_graceful_shutdown``) are uvicorn's own.
    """

    def __init__(self, config: uvicorn.Config, book: ConnectionBook) -> None:
        super().__init__(config)
        self._stop_asked = asyncio.Event()
        self.book = book
        limits = book.limits
        self._tick = min(_TICK_SECONDS, limits.head_seconds / 4, limits.body_seconds / 4)
        self._logs: list[RateLimit] = []

    @classmethod
    def for_app(cls, app: ASGIApp, *, stop_seconds: float,
                limits: DoorLimits | None = None, tls_cert: str | None = None,
                tls_key: str | None = None) -> DoorServer:
        """A server for the door ``app``: no lifespan, no logs of its own, no proxy
        headers, no websockets; at most ``stop_seconds`` to close connections at the end;
        httptools with the door's ``limits`` (default: the documented bounds); TLS with
        ``tls_cert`` and ``tls_key`` (a listener beyond loopback)."""
        limits = limits or DoorLimits()
        book = ConnectionBook(limits, connection_cap(limits.connections))
        config = uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False,
            log_config=None, proxy_headers=False, server_header=False, ws="none",
            http=protocol_for(book), backlog=accept_batch(book.cap),
            timeout_graceful_shutdown=int(stop_seconds),
            ssl_certfile=tls_cert, ssl_keyfile=tls_key)
        return cls(config, book)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        limits = self.book.limits
        with limited_logs(lines=limits.log_lines, accept_lines=limits.accept_log_lines,
                          seconds=limits.log_seconds) as self._logs:
            await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # asyncio takes its backlog both for the kernel's queue and for how many
        # connections it accepts at one wake-up, before any is counted. The backlog is
        # small (accept_batch) to bound the latter; the queue is made long again, or a
        # burst of callers would wait out a dropped SYN (one second) each.
        for sock in sockets or []:
            sock.listen(_LISTEN_QUEUE)

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield

    def stop(self) -> None:
        """Ask the server to stop serving (what setting ``should_exit`` asks)."""
        self.should_exit = True
        self._stop_asked.set()

    async def main_loop(self) -> None:
        # uvicorn's loop wakes every 0.1 s to look at ``should_exit`` and refreshes the
        # Date header at every tenth wake-up. Here a stop wakes it at once, so it wakes
        # once a second (more often when a test shortens the deadlines), each wake-up counts
        # as a tenth (the header is as fresh). Each wake-up also closes the connections
        # whose head or body is overdue and reports the log lines held back.
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._tick):
                    await self._stop_asked.wait()
            self.book.sweep(self.server_state.connections)
            for log in self._logs:
                log.flush()
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's shutdown with its fixed 0.1 s sleep and 0.1 s polls made short.
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        state = self.server_state
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while (state.connections or state.tasks) and not self.force_exit:
                    await asyncio.sleep(_STOP_POLL_SECONDS)
                for server in self.servers:
                    await server.wait_closed()
        except TimeoutError:
            logging.getLogger("uvicorn.error").error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded",
                len(state.tasks))
            for task in state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()
