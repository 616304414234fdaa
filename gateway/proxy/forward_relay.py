"""The forward proxy's side of an answer: relayed to the agent chunk by chunk as it
arrives, with its framing made anew for the agent's connection.

In order: the answer's headers as the agent gets them (hop-by-hop, every ``Proxy-*``
and the framing are never forwarded), minus a redirect's ``Location`` that leads to
``formation.invalid``; the framing (``Content-Length`` as received, else chunked for an
HTTP/1.1 agent, else the close); :func:`relay`, which writes the answer and says whether
the connection may carry another request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import httpx

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


def _answer_headers(raw: list[tuple[bytes, bytes]]) -> tuple[list[bytes], bytes | None]:
    """A response's headers as header lines for the agent, and its one valid
    ``Content-Length`` (``None``: absent, several, or beside a Transfer-Encoding)."""
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


def _without_virtual_location(raw: list[tuple[bytes, bytes]],
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
class _Framing:
    """How an answer's body goes to the agent."""

    head: bytes                     # status line and headers, the empty line included
    length: int | None              # a sized body's Content-Length
    chunked: bool                   # re-chunked for an HTTP/1.1 agent
    bodiless: bool                  # HEAD, 1xx, 204, 304: nothing after the head
    keep_alive: bool


def _framing(response: httpx.Response, url: httpx.URL, head: RequestHead,
             keep_alive: bool) -> _Framing:
    status = response.status_code
    raw = response.headers.raw
    removed = False
    if status in _REDIRECT_STATUSES:
        kept = _without_virtual_location(raw, url)
        removed, raw = len(kept) != len(raw), kept
    lines, length = _answer_headers(raw)
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
    reason = response.extensions.get("reason_phrase") or _phrase(status)
    return _Framing(b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason, b"".join(lines)),
                    None if length is None else int(length), chunked, bodiless, keep_alive)


async def relay(response: httpx.Response, url: httpx.URL, head: RequestHead,
                 writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
    """Write ``response`` to the agent as it arrives, chunk by chunk; whether the
    connection may carry another request.

    A sized body's head waits for its first chunk, so both go in one write: such a
    body's first bytes nearly always came with the head, and one write spares the agent
    a wakeup. Any other head (a stream, SSE) is written at once.
    """
    framing = _framing(response, url, head, keep_alive)
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

