"""The forward proxy's side of a request: the answers it gives itself, the head and the
body it reads, and the request it hands on.

In order:

1. :class:`ForwardAnswer`, an answer the proxy gives itself, marked ``Proxy-Status: murmur;
   error=<code>``, and the few that several parts of the proxy give;
2. the request head, parsed by :func:`parse_head`, a small strict parser (h11 costs
   about 65 us a request, this a few: the proxy is on every call an agent makes) whose
   header lines ``http_head`` reads;
3. the body, framed by ``Content-Length`` or chunked and read under its size bound
   (:func:`body_length`, :func:`read_chunked`);
4. the request ``FormationTransport`` gets: the target URL, checked as text
   (:func:`target_url`), and the agent's headers minus those never forwarded
   (hop-by-hop, every ``Proxy-*``, framing), with ``Host`` and framing made anew
   (:func:`transport_request`).

The deadlines are :class:`~gateway.proxy.forward.ForwardProxy`'s, which reads with these.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import httpx

from gateway.errors import GatewayError
from gateway.proxy.formation_headers import HOP_BY_HOP
from gateway.proxy.http_head import MalformedHead, ReadOnce, head_lines
from gateway.proxy.proxy_errors import FormationRefused
from gateway.proxy.virtual_names import check_raw_url, names_formation

# --------------------------------------------------------------------------------------
# 1. The answers the proxy gives itself


class ForwardAnswer(GatewayError):
    """An answer the proxy gives itself: status, ``error`` code and message, marked
    ``Proxy-Status: murmur; error=<code>`` (RFC 9209) so an agent's client can tell it
    from an answer relayed from elsewhere. The connection is closed after it (the
    request's body may be unread)."""

    def __init__(self, status: int, error: str, message: str,
                 headers: tuple[tuple[bytes, bytes], ...] = (),
                 detail: dict[str, object] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.message = message
        self.headers = headers
        #: What a client reads besides the message (a model refusal's code and counts).
        self.detail = detail

    def encode(self) -> bytes:
        answer: dict[str, object] = {"error": self.error, "message": self.message}
        if self.detail is not None:
            answer["detail"] = self.detail
        body = json.dumps(answer).encode()
        extra = b"".join(name + b": " + value + b"\r\n" for name, value in self.headers)
        return (b"HTTP/1.1 %d %s\r\n" % (self.status, HTTPStatus(self.status).phrase.encode())
                + extra + b"Proxy-Status: murmur; error=" + self.error.encode("ascii")
                + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n" % len(body) + body)


def bad_request(message: str) -> ForwardAnswer:
    return ForwardAnswer(400, "bad_request", message)


def body_too_large(limit: int) -> ForwardAnswer:
    return ForwardAnswer(413, "body_too_large", f"a request body may have at most {limit} bytes")


def refused_virtual() -> ForwardAnswer:
    return ForwardAnswer(403, "formation_refused", FormationRefused.MESSAGE)


# --------------------------------------------------------------------------------------
# 2. The request head

_TOKEN: Final = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE: Final = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/1\.([01])")
_NONE: Final[list[bytes]] = []                # the values of an absent header (never changed)
_NO_NAMES: Final[frozenset[bytes]] = frozenset()


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A parsed request head. ``keys`` are the header names as compared here: lower
    case, ``_`` read as ``-`` (as FormationTransport compares them); ``index`` has
    each key's values in order, for the few the proxy reads itself."""

    method: bytes
    target: bytes
    minor: int                              # HTTP/1.<minor>
    headers: list[tuple[bytes, bytes]]
    keys: list[bytes]
    index: dict[bytes, list[bytes]]
    #: The names ``Connection`` lists (``close``, ``keep-alive``, headers to drop).
    named: frozenset[bytes]

    def values(self, key: bytes) -> list[bytes]:
        return self.index.get(key, _NONE)



def parse_head(data: bytes) -> RequestHead:
    """The head ``data`` (without its final empty line), or a 400 :class:`ForwardAnswer`.

    Strict, so that the proxy and whatever is behind it cannot read one head two ways:
    CRLF line ends only, one space between the request line's parts, ``HTTP/1.0`` or
    ``HTTP/1.1``, token header names with no space before the colon, no line folding,
    no control characters in a value.
    """
    try:
        first, headers, keys = head_lines(data.removeprefix(b"\r\n"))
    except MalformedHead:
        raise bad_request("a header line is malformed") from None
    request_line = _REQUEST_LINE.fullmatch(first)
    if request_line is None:
        raise bad_request("the request line is not 'METHOD target HTTP/1.1'")
    index: dict[bytes, list[bytes]] = {}
    for key, (_, value) in zip(keys, headers, strict=True):
        values = index.get(key)
        if values is None:
            index[key] = [value]
        else:
            values.append(value)
    connection = index.get(b"connection")
    named = _NO_NAMES if connection is None else frozenset(
        token.strip().lower().replace(b"_", b"-")
        for value in connection for token in value.split(b","))
    return RequestHead(request_line[1], request_line[2], int(request_line[3]), headers, keys,
                       index, named)


#: :func:`parse_head` of a whole request head (its final empty line included), read once
#: for each head an agent repeats (:class:`~gateway.proxy.http_head.ReadOnce`). Nothing
#: changes a RequestHead once it is read: what goes to a target is a new list
#: (``forwarded_to_target``).
read_head: Final = ReadOnce(lambda data: parse_head(data[:-4]))


# --------------------------------------------------------------------------------------
# 3. The body

_CHUNK_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_TRAILER_LINES: Final = 64


def body_length(head: RequestHead, limit: int) -> int | None:
    """The body's length from its framing headers; ``None`` for chunked. Ambiguous
    framing (both headers, several lengths, another coding) is refused: it is how one
    request is smuggled inside another."""
    codings = head.values(b"transfer-encoding")
    lengths = head.values(b"content-length")
    if codings:
        if lengths:
            raise bad_request("both Transfer-Encoding and Content-Length")
        if len(codings) != 1 or codings[0].lower() != b"chunked":
            raise ForwardAnswer(501, "not_implemented", "only Transfer-Encoding: chunked is read")
        return None
    if not lengths:
        return 0
    if len(lengths) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        raise bad_request("Content-Length is not one number")
    length = int(lengths[0])
    if length > limit:
        raise body_too_large(limit)
    return length


async def read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A chunked body, decoded; extensions ignored, trailers read and dropped."""
    parts: list[bytes] = []
    total = 0
    while True:
        size_text = (await _line(reader))[:-2].partition(b";")[0]
        if _CHUNK_SIZE.fullmatch(size_text) is None:
            raise bad_request("a chunk size is malformed")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limit:
            raise body_too_large(limit)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise bad_request("a chunk does not end with CRLF")
    for _ in range(_MAX_TRAILER_LINES):
        if await _line(reader) == b"\r\n":
            return b"".join(parts)
    raise bad_request("too many trailer lines")


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One line of a chunked body, bounded as a head is."""
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise bad_request("a line of the chunked body is too long") from None


# --------------------------------------------------------------------------------------
# 4. The request FormationTransport gets

#: Never forwarded to the target besides the hop-by-hop set and every ``Proxy-*``
#: header: framing (made anew for each side) and ``Expect`` (the proxy reads the body
#: itself). ``Host`` is replaced by the target's authority (RFC 9112 s. 3.2.2).
_REQUEST_DROPPED: Final = frozenset(
    name.encode() for name in HOP_BY_HOP | {"content-length", "expect", "host"})
#: Headers never forwarded either way (the answer's are dropped by ``forward_relay``).
PROXY_PREFIX: Final = b"proxy-"
#: The task a request is for, as the agent process names it (a ``Proxy-`` header: read
#: here, never forwarded).
TASK_HEADER: Final = b"proxy-murmur-task"

_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


def forwarded_to_target(head: RequestHead) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """The agent's headers a target gets (see ``_REQUEST_DROPPED``), and their keys."""
    named = head.named
    kept = [(key, header) for key, header in zip(head.keys, head.headers, strict=True)
            if key not in _REQUEST_DROPPED and not key.startswith(PROXY_PREFIX)
            and key not in named]
    return [header for _, header in kept], [key for key, _ in kept]


def target_url(target: str) -> httpx.URL:
    """The URL of an absolute-form ``http://`` target (or ``https://``, which the member's
    FormationTransport sends only to a model member's endpoint), refused before its body is read
    when it names ``formation.invalid`` in any but the exact form. The check reads the
    URL *text*, as FormationClient does: httpx folds case and drops ``:80`` when it
    parses, after which ``CODER.formation.invalid:80`` would pass for a callee's address.
    FormationTransport repeats every check it still can on the parsed URL."""
    try:
        check_raw_url(target)
    except FormationRefused:
        raise refused_virtual() from None
    if target[:7].lower() != "http://" and target[:8].lower() != "https://":
        raise bad_request("this proxy takes an absolute http:// URL, or CONNECT host:port")
    try:
        return httpx.URL(target)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        if names_formation(target):
            raise refused_virtual() from None
        raise bad_request("the request URL cannot be parsed") from None


def transport_request(head: RequestHead, url: httpx.URL, body: bytes,
                      timeouts: dict[str, float | None]) -> httpx.Request:
    """The request FormationTransport gets: the agent's headers minus the dropped ones,
    ``Host`` from the target, and ``Content-Length`` as httpx itself would set it
    (built from a stream, which skips httpx's header defaults: a third of the cost)."""
    method = head.method.decode("ascii")
    headers = [(b"Host", url.netloc), *forwarded_to_target(head)[0]]
    if body or method in _BODY_METHODS:
        headers.append((b"Content-Length", b"%d" % len(body)))
    return httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body),
                         extensions={"timeout": timeouts})

