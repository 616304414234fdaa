"""The forward proxy's ``CONNECT host:port``: a TCP tunnel where the allow-list admits it.

In order: :func:`tunnel`, which refuses a virtual address (those are ``http://`` only),
a model member's endpoint (its requests go through the egress that attaches the key and
counts: ``gateway.proxy.inference``) and any host the member's
``capabilities.network.allow`` does not admit, opens the
connection under the proxy's connect bound and answers ``200 Connection established``;
then the splice, bytes copied both ways until both sides are done, an end of one
direction passed on as a half-close.
"""

from __future__ import annotations

import asyncio
import re
from typing import Final

import httpx

from gateway.proxy.egress import AllowList
from gateway.proxy.forward_request import ForwardAnswer as _Answer
from gateway.proxy.forward_request import RequestHead
from gateway.proxy.forward_request import bad_request as _bad_request
from gateway.proxy.forward_request import refused_virtual as _refused_virtual
from gateway.proxy.virtual_names import names_formation

_AUTHORITY: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")
_ESTABLISHED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"
#: How much of a stream is read at once (the proxy's linger reads by it too).
PIPE_CHUNK: Final = 64 * 1024


async def tunnel(head: RequestHead, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, allow: AllowList,
                 connect_seconds: float, endpoint: tuple[str, int | None] | None = None
                 ) -> None:
    """Serve a ``CONNECT`` whose head is ``head``, or raise the proxy's answer. ``allow``
    is the member's allow-list (a tunnel and a request obey one grant);
    ``connect_seconds`` bounds opening the connection; ``endpoint``, a model member's
    endpoint's host and port, which no tunnel reaches."""
    authority = head.target.decode("ascii")
    if names_formation(authority):
        raise _refused_virtual()        # virtual addresses are http:// only
    match = _AUTHORITY.fullmatch(authority)
    if match is None or not 0 < int(match[2]) < 65536:
        raise _bad_request("CONNECT needs host:port")
    host, port = match[1].strip("[]"), int(match[2])
    if endpoint is not None and (host.rstrip(".").lower(), port) == endpoint:
        raise _Answer(403, "egress_refused",
                      f"refused: the model endpoint {host}:{port} is reached with requests "
                      "to this proxy in absolute form (the runtime attaches its key), "
                      "not through CONNECT")
    try:
        allowed = allow.allows(httpx.URL(f"https://{authority}/"))
    except (httpx.InvalidURL, UnicodeError):
        raise _bad_request("CONNECT needs host:port") from None
    if not allowed:
        raise _Answer(403, "egress_refused",
                      f"refused: capabilities.network.allow does not allow {host}:{port}")
    try:
        async with asyncio.timeout(connect_seconds):
            up_reader, up_writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        raise _Answer(502, "upstream_unavailable",
                      f"{host}:{port} cannot be reached: {type(exc).__name__}") from None
    try:
        writer.write(_ESTABLISHED)
        await _splice(reader, writer, up_reader, up_writer)
    finally:
        up_writer.close()


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
    """Copy bytes both ways until both sides are done. An end of one direction is
    passed on as a half-close; a broken side ends both."""
    upstream = asyncio.ensure_future(_pump(reader, up_writer))
    downstream = asyncio.ensure_future(_pump(up_reader, writer))
    try:
        pending: set[asyncio.Future[bool]] = {upstream, downstream}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not all(future.result() for future in done):
                break
    finally:
        for future in (upstream, downstream):
            future.cancel()
        await asyncio.gather(upstream, downstream, return_exceptions=True)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> bool:
    """Copy until ``source`` ends; ``False`` when either side broke."""
    try:
        while chunk := await source.read(PIPE_CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        return False
    return True
