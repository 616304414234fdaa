"""The forward proxy's side of an answer: relayed to the agent chunk by chunk as it
arrives, with its framing made anew for the agent's connection.

In order: the answer's headers as the agent gets them (hop-by-hop, every ``Proxy-*``
and the framing are never forwarded), minus a redirect's ``Location`` that leads to
``formation.invalid``; the framing (``Content-Length`` as received, else chunked for an
HTTP/1.1 agent, else the close); :func:`relay`, which writes an answer httpx read and
says whether the connection may carry another request; :func:`relay_hop`, the same for
an answer a member's door gave the proxy's own hop (``door_hop``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import httpx

from gateway.proxy.door_hop import (
    AnswerHead,
    DoorConnection,
    DoorConnections,
    HopFailed,
    body_chunks,
)
from gateway.proxy.formation_headers import HOP_BY_HOP
from gateway.proxy.forward_request import PROXY_PREFIX as _PROXY_PREFIX
from gateway.proxy.forward_request import RequestHead
from gateway.proxy.virtual_names import names_formation

#: Never forwarded to the agent besides every ``Proxy-*`` header: framing is made anew
#: for its connection.
_RESPONSE_DROPPED: Final = frozenset(name.encode() for name in HOP_BY_HOP | {"content-length"})
_HEAD: Final = b"HEAD"
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: A sized body up to this many bytes is read whole and written with its head.
_WHOLE: Final = 64 * 1024
#: The names a door's answer head may carry to go to the agent as it came: none is
#: hop-by-hop, a Proxy-* header, framing to make anew, or a Location to read.
_AS_IT_CAME: Final = frozenset({b"date", b"server", b"content-type", b"content-length",
                                b"cache-control", b"vary", b"a2a-version",
                                b"x-content-type-options", b"traceparent"})


def _answer_headers(raw: Sequence[tuple[bytes, bytes]], keys: Sequence[bytes] | None = None
                    ) -> tuple[list[bytes], bytes | None]:
    """A response's headers as header lines for the agent, and its one valid
    ``Content-Length`` (``None``: absent, several, or beside a Transfer-Encoding).
    ``keys``: each header's name as compared, when the caller read them already."""
    if keys is None:
        keys = [name.lower().replace(b"_", b"-") for name, _ in raw]
    named: set[bytes] = set()
    lengths: list[bytes] = []
    coded = False
    for key, (_, value) in zip(keys, raw, strict=True):
        if key == b"connection" or key == b"proxy-connection":
            named.update(token.strip().lower() for token in value.split(b","))
        elif key == b"content-length":
            lengths.append(value.strip())
        elif key == b"transfer-encoding":
            coded = True
    lines = [name + b": " + value + b"\r\n" for key, (name, value) in zip(keys, raw, strict=True)
             if key not in _RESPONSE_DROPPED and not key.startswith(_PROXY_PREFIX)
             and key not in named]
    single = lengths[0] if len(lengths) == 1 and lengths[0].isdigit() and not coded else None
    return lines, single


def _without_virtual_location(raw: Sequence[tuple[bytes, bytes]],
                              url: httpx.URL) -> list[tuple[bytes, bytes]]:
    """A redirect's headers minus a ``Location`` that leads to ``formation.invalid``.

    The proxy cannot tell a follow-up from a fresh request, so a callee (or an outside
    host) could otherwise steer this member's agent, and its token, to a member of the
    callee's choosing: the confused deputy of docs/proxy.md, step 5. Without a
    Location no client follows; the agent still sees the 3xx, marked
    ``Proxy-Status: murmur; error=formation_refused``.
    """
    return [(name, value) for name, value in raw
            if name.lower() != b"location" or not _leads_to_formation(url, value)]


def _leads_to_formation(base: httpx.URL, location: bytes) -> bool:
    text = location.decode("latin-1")
    if names_formation(text):
        return True
    try:
        resolved = base.join(text)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return True                         # unreadable: no client follows it either
    return names_formation(resolved.host)


@dataclass(frozen=True, slots=True)
class Framing:
    """How an answer's body goes to the agent."""

    head: bytes                     # status line and headers, the empty line included
    length: int | None              # a sized body's Content-Length
    chunked: bool                   # re-chunked for an HTTP/1.1 agent
    bodiless: bool                  # HEAD, 1xx, 204, 304: nothing after the head
    keep_alive: bool


def answer_framing(status: int, reason: bytes, raw: Sequence[tuple[bytes, bytes]],
                   url: Callable[[], httpx.URL], head: RequestHead,
                   keep_alive: bool, keys: Sequence[bytes] | None = None) -> Framing:
    """How an answer (``status``, ``reason``, the headers ``raw`` and, when read
    already, their ``keys``) to the request ``head`` goes to the agent; ``url()`` gives
    the request's URL, which a redirect's ``Location`` is read against (asked for a
    redirect only)."""
    removed = False
    if status in _REDIRECT_STATUSES:
        kept = _without_virtual_location(raw, url())
        removed, raw = len(kept) != len(raw), kept
        keys = None
    lines, length = _answer_headers(raw, keys)
    if removed:  # said, so a murmur-aware client can raise what it raised in-process
        lines.append(b"Proxy-Status: murmur; error=formation_refused\r\n")
    bodiless = head.method == _HEAD or status < 200 or status in _NO_BODY_STATUSES
    chunked = False
    if length is not None and status != 204:
        lines.append(b"Content-Length: " + length + b"\r\n")  # for HEAD: what GET gets
    elif not bodiless and head.minor == 1:
        lines.append(b"Transfer-Encoding: chunked\r\n")
        chunked = True
    elif not bodiless:
        keep_alive = False                  # HTTP/1.0 without a length: the close ends it
    if not keep_alive:
        lines.append(b"Connection: close\r\n")
    return Framing(b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason or _phrase(status),
                                                     b"".join(lines)),
                    None if length is None else int(length), chunked, bodiless, keep_alive)


async def relay(response: httpx.Response, url: httpx.URL, head: RequestHead,
                 writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
    """Write ``response`` to the agent as it arrives, chunk by chunk; whether the
    connection may carry another request.

    A sized body's head waits for its first chunk, so both go in one write: such a
    body's first bytes nearly always came with the head, and one write spares the agent
    a wakeup. Any other head (a stream, SSE) is written at once.
    """
    framing = answer_framing(response.status_code,
                             response.extensions.get("reason_phrase") or b"",
                             response.headers.raw, lambda: url, head, keep_alive)
    pending = framing.head
    if framing.bodiless or not framing.length:
        writer.write(pending)
        pending = b""
    sent = 0
    try:
        async for chunk in response.aiter_raw():
            if not chunk or framing.bodiless:
                continue
            data = b"%x\r\n%s\r\n" % (len(chunk), chunk) if framing.chunked else chunk
            writer.write(pending + data if pending else data)
            pending = b""
            sent += len(chunk)
            await writer.drain()            # each chunk goes now: an SSE event is one
    except httpx.TransportError:
        return False                        # cut mid-body: the close tells the agent
    finally:
        await response.aclose()
    if framing.chunked:
        writer.write(b"0\r\n\r\n")
    elif framing.length is not None and not framing.bodiless and sent != framing.length:
        return False                        # the body ended short: so must the connection
    return framing.keep_alive


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Unknown"


async def relay_hop(doors: DoorConnections, connection: DoorConnection, answer: AnswerHead,
                    url: Callable[[], httpx.URL], head: RequestHead,
                    writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
    """Write a door's ``answer``, read on ``connection`` (the forward proxy's hop), to
    the agent as it arrives; whether the agent's connection may carry another request.
    The door's connection goes back to ``doors`` when its answer was read to the end,
    and is closed otherwise.

    A sized body of up to 64 KiB (nearly every answer) is read whole and goes with the
    head in one write; it raises :class:`HopFailed` when it ends short, before anything
    was written (the caller answers 502). Any other body (a stream, SSE) follows its
    head chunk by chunk, as :func:`relay` sends it.
    """
    reader = connection.reader
    if (keep_alive and answer.length is not None and answer.length <= _WHOLE
            and answer.minor == 1 and _AS_IT_CAME.issuperset(answer.keys)
            and answer.status not in _REDIRECT_STATUSES and head.method != _HEAD
            and answer.status not in _NO_BODY_STATUSES):
        return await _relay_as_it_came(doors, connection, answer, writer)
    framing = answer_framing(answer.status, answer.reason, answer.headers, url, head,
                             keep_alive, answer.keys)
    finished = False
    try:
        if head.method == _HEAD or answer.status in _NO_BODY_STATUSES:
            writer.write(framing.head)
        elif answer.length is not None and answer.length <= _WHOLE:
            try:
                body = await reader.readexactly(answer.length) if answer.length else b""
            except (asyncio.IncompleteReadError, OSError):
                raise HopFailed("RemoteProtocolError") from None
            writer.write(framing.head + body)
        else:
            writer.write(framing.head)
            try:
                async for chunk in body_chunks(reader, answer):
                    if chunk and not framing.bodiless:
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk)
                                     if framing.chunked else chunk)
                        await writer.drain()    # each chunk goes now: an SSE event is one
            except HopFailed:
                return False                    # cut mid-body: the close tells the agent
            if framing.chunked:
                writer.write(b"0\r\n\r\n")
        finished = not answer.close
    finally:
        if finished:
            doors.release(connection)
        else:
            doors.discard(connection)
    await writer.drain()
    return framing.keep_alive


async def _relay_as_it_came(doors: DoorConnections, connection: DoorConnection,
                            answer: AnswerHead, writer: asyncio.StreamWriter) -> bool:
    """A door's sized answer whose head carries nothing to drop or make anew (only
    ``_AS_IT_CAME`` names), to a request that keeps its connection: head and body go to
    the agent in one write, the head as the door wrote it."""
    try:
        body = await connection.reader.readexactly(answer.length) if answer.length else b""
    except (asyncio.IncompleteReadError, OSError):
        doors.discard(connection)
        raise HopFailed("RemoteProtocolError") from None
    if answer.close:
        doors.discard(connection)
    else:
        doors.release(connection)
    writer.write(answer.raw + body)
    await writer.drain()
    return True
