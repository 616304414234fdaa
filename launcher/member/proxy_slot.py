"""The member's forward proxy, reserved at start and built on its first connection.

An agent process is confined to one TCP port, its member's forward proxy, so the port
must exist before the agent process starts; the proxy itself imports httpx (tens of
milliseconds of a member's start) and most agents never send a request. So, in order:
a listening socket on ``127.0.0.1`` and the proxy's secret are made now
(:class:`ProxySlot`); the agent's environment names them; the first connection that
arrives (it waits in the socket's backlog meanwhile) makes the runtime build the
:class:`gateway.proxy.forward.ForwardProxy` and serve on that socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.proxy.env import proxy_environment, proxy_url

if TYPE_CHECKING:
    from gateway.proxy.forward import ForwardProxy

#: Connections the kernel holds for the proxy before it serves.
BACKLOG = 128


class ProxySlot:
    """The socket and secret of the forward proxy to be (see the module docstring)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.bind(("127.0.0.1", 0))
            self._sock.listen(BACKLOG)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self._secret = secrets.token_urlsafe(32)
        self.port: int = self._sock.getsockname()[1]
        self.proxy: ForwardProxy | None = None
        self._starting: asyncio.Task[None] | None = None

    def __repr__(self) -> str:  # never the secret
        return f"ProxySlot(port={self.port})"

    @property
    def url(self) -> str:
        return proxy_url(self._secret, self.port)

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        return proxy_environment(env, self.url)

    def serve_when_reached(self, build: Callable[[str], ForwardProxy]) -> None:
        """Build the proxy (``build(secret)``) and serve once a connection arrives."""
        loop = asyncio.get_running_loop()

        def reached() -> None:
            loop.remove_reader(self._sock.fileno())
            self._starting = loop.create_task(self._serve(build))

        loop.add_reader(self._sock.fileno(), reached)

    async def serve_now(self, build: Callable[[str], ForwardProxy]) -> ForwardProxy:
        await self._serve(build)
        assert self.proxy is not None
        return self.proxy

    async def _serve(self, build: Callable[[str], ForwardProxy]) -> None:
        proxy = build(self._secret)
        await proxy.start(sock=self._sock)
        self.proxy = proxy

    async def close(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        if self._starting is not None:
            with contextlib.suppress(BaseException):
                await self._starting
        if self.proxy is not None:
            await self.proxy.close()
        self._sock.close()


