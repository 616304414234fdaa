"""The forward proxy: virtual addresses and egress for any HTTP client.

An agent that runs in a process of its own reaches the formation and the network only
through its member's forward proxy, an HTTP/1.1 proxy on ``127.0.0.1:<port>`` that the
agent's environment names (:func:`proxy_environment`). In order:

1. the bounds (:class:`ProxyLimits`) and the agent's environment;
2. the request head and body, read under a size bound and a deadline; the head is
   parsed by :func:`parse_head`, a small strict parser (h11 costs about 65 us a request,
   this a few: the proxy is on every call an agent makes);
3. the headers forwarded each way (hop-by-hop and ``Proxy-*`` never are);
4. :class:`ForwardProxy`, whose connections go: the head; ``Proxy-Authorization: Basic
   murmur:<secret>`` compared in constant time, else 407; then the target. An
   absolute-form ``http://`` URL is handed to the member's own
   :class:`~gateway.proxy.formation.FormationTransport` (the five steps for a virtual address, the
   allow-list and no token for any other host: one implementation, not a copy);
   ``CONNECT host:port`` is a TCP tunnel where the same allow-list admits it;
5. the answer, relayed chunk by chunk as it arrives with its framing made anew for the
   agent's connection (``Content-Length`` as received, else chunked), and the tunnel's
   splice.

The secret opens this proxy only. It is not a token, and no log line, trace record,
repr or answer carries it; it leaves this module only in :attr:`ForwardProxy.url` (and
so the agent's environment). docs/proxy.md ("The forward proxy") has every decision and
bound.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import logging
import re
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import httpx

from gateway.errors import GatewayError
from gateway.proxy.env import USER, proxy_environment, proxy_url
from gateway.proxy.formation import (
    CALLING_TASK,
    HOP_BY_HOP,
    TRUSTED,
    UNTRUSTED,
    DoorUnavailable,
    EgressRefused,
    FormationRefused,
    FormationTransport,
    check_raw_url,
    exact_virtual_name,
    names_formation,
)

_log = logging.getLogger(__name__)

PROXY_AUTHENTICATE: Final = 'Basic realm="murmur"'


# --------------------------------------------------------------------------------------
# 1. Bounds and the agent's environment


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """The bounds the proxy keeps; docs/proxy.md ("The forward proxy") has the reasons."""

    #: A request head (request line and headers) past this many bytes gets 431.
    head_bytes: int = 64 * 1024
    #: A head must be complete this long after the connection opened or its last answer.
    head_seconds: float = 10.0
    #: A request body is read whole (both transports below send it whole); past this, 413.
    body_bytes: int = 16 * 1024 * 1024
    #: The whole body must have arrived this long after its head.
    body_seconds: float = 30.0
    #: Open connections (tunnels included); one more is answered 503 and closed.
    connections: int = 256
    #: Opening a connection: to a door or host for a request, to a host for a tunnel.
    connect_seconds: float = 10.0


# --------------------------------------------------------------------------------------
# 2. The request head and body

_TOKEN: Final = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE: Final = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/1\.([01])")
_HEADER_LINE: Final = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(.*?)[ \t]*", re.DOTALL)
#: Control characters other than HTAB; CR and LF inside a line mean a bare line break.
_BAD_VALUE: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_TRAILER_LINES: Final = 64
_NONE: Final[list[bytes]] = []                # the values of an absent header (never changed)


class _Answer(GatewayError):
    """An answer the proxy gives itself: status, ``error`` code and message, marked
    ``Proxy-Status: murmur; error=<code>`` (RFC 9209) so an agent's client can tell it
    from an answer relayed from elsewhere. The connection is closed after it (the
    request's body may be unread)."""

    def __init__(self, status: int, error: str, message: str,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.message = message
        self.headers = headers

    def encode(self) -> bytes:
        body = json.dumps({"error": self.error, "message": self.message}).encode()
        extra = b"".join(name + b": " + value + b"\r\n" for name, value in self.headers)
        return (b"HTTP/1.1 %d %s\r\n" % (self.status, HTTPStatus(self.status).phrase.encode())
                + extra + b"Proxy-Status: murmur; error=" + self.error.encode("ascii")
                + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n" % len(body) + body)


def _bad_request(message: str) -> _Answer:
    return _Answer(400, "bad_request", message)


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

    def values(self, key: bytes) -> list[bytes]:
        return self.index.get(key, _NONE)

    def connection_tokens(self) -> set[bytes]:
        """The names ``Connection`` lists (``close``, ``keep-alive``, headers to drop)."""
        return {token.strip().lower().replace(b"_", b"-")
                for value in self.values(b"connection") for token in value.split(b",")}


def parse_head(data: bytes) -> RequestHead:
    """The head ``data`` (without its final empty line), or a 400 :class:`_Answer`.

    Strict, so that the proxy and whatever is behind it cannot read one head two ways:
    CRLF line ends only, one space between the request line's parts, ``HTTP/1.0`` or
    ``HTTP/1.1``, token header names with no space before the colon, no line folding,
    no control characters in a value.
    """
    lines = data.removeprefix(b"\r\n").split(b"\r\n")
    request_line = _REQUEST_LINE.fullmatch(lines[0])
    if request_line is None:
        raise _bad_request("the request line is not 'METHOD target HTTP/1.1'")
    headers: list[tuple[bytes, bytes]] = []
    keys: list[bytes] = []
    index: dict[bytes, list[bytes]] = {}
    for line in lines[1:]:
        header = _HEADER_LINE.fullmatch(line)
        if header is None or _BAD_VALUE.search(header[2]) is not None:
            raise _bad_request("a header line is malformed")
        name, value = header[1], header[2]
        key = name.lower().replace(b"_", b"-")
        headers.append((name, value))
        keys.append(key)
        index.setdefault(key, []).append(value)
    return RequestHead(request_line[1], request_line[2], int(request_line[3]), headers, keys,
                       index)


def _body_length(head: RequestHead, limit: int) -> int | None:
    """The body's length from its framing headers; ``None`` for chunked. Ambiguous
    framing (both headers, several lengths, another coding) is refused: it is how one
    request is smuggled inside another."""
    codings = head.values(b"transfer-encoding")
    lengths = head.values(b"content-length")
    if codings:
        if lengths:
            raise _bad_request("both Transfer-Encoding and Content-Length")
        if len(codings) != 1 or codings[0].lower() != b"chunked":
            raise _Answer(501, "not_implemented", "only Transfer-Encoding: chunked is read")
        return None
    if not lengths:
        return 0
    if len(lengths) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        raise _bad_request("Content-Length is not one number")
    length = int(lengths[0])
    if length > limit:
        raise _body_too_large(limit)
    return length


def _body_too_large(limit: int) -> _Answer:
    return _Answer(413, "body_too_large", f"a request body may have at most {limit} bytes")


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A chunked body, decoded; extensions ignored, trailers read and dropped."""
    parts: list[bytes] = []
    total = 0
    while True:
        size_text = (await _line(reader))[:-2].partition(b";")[0]
        if _CHUNK_SIZE.fullmatch(size_text) is None:
            raise _bad_request("a chunk size is malformed")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limit:
            raise _body_too_large(limit)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise _bad_request("a chunk does not end with CRLF")
    for _ in range(_MAX_TRAILER_LINES):
        if await _line(reader) == b"\r\n":
            return b"".join(parts)
    raise _bad_request("too many trailer lines")


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One line of a chunked body, bounded as a head is."""
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise _bad_request("a line of the chunked body is too long") from None


# --------------------------------------------------------------------------------------
# 3. Forwarded headers, both ways

#: Never forwarded either way besides the hop-by-hop set: every ``Proxy-*`` header,
#: framing (made anew for each side) and ``Expect`` (the proxy reads the body itself).
#: ``Host`` is replaced by the target's authority (RFC 9112 s. 3.2.2).
_REQUEST_DROPPED: Final = frozenset(
    name.encode() for name in HOP_BY_HOP | {"content-length", "expect", "host"})
_RESPONSE_DROPPED: Final = frozenset(name.encode() for name in HOP_BY_HOP | {"content-length"})
_PROXY_PREFIX: Final = b"proxy-"
#: The task a request is for, as the agent process names it (a ``Proxy-`` header: read
#: here, never forwarded).
TASK_HEADER: Final = b"proxy-murmur-task"


def _forwarded(head: RequestHead) -> list[tuple[bytes, bytes]]:
    named = head.connection_tokens()
    return [header for key, header in zip(head.keys, head.headers, strict=True)
            if key not in _REQUEST_DROPPED and not key.startswith(_PROXY_PREFIX)
            and key not in named]


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


# --------------------------------------------------------------------------------------
# 4. The proxy

_CONNECT: Final = b"CONNECT"
_HEAD: Final = b"HEAD"
_AUTHORITY: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")
_ESTABLISHED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_PIPE_CHUNK: Final = 64 * 1024
#: How long, and how many bytes, the proxy reads and drops after an answer of its own.
_LINGER_SECONDS: Final = 1.0
_LINGER_BYTES: Final = 256 * 1024
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: Parsed target URLs kept per proxy (see ForwardProxy._url); past it, parsed each time.
_URL_CACHE: Final = 256


def _refused_virtual() -> _Answer:
    return _Answer(403, "formation_refused", FormationRefused.MESSAGE)


class ForwardProxy:
    """The forward proxy of one member (see the module docstring).

    ``transport`` is the member's FormationTransport (its pool, tokens, door directory,
    allow-list and ``on_call`` hook); the proxy never closes it. ``trust()`` says
    ``"trusted"`` only while every live task of the member is trusted: the proxy cannot
    tell which task a request is for, so it stamps that on every call to a member.
    """

    def __init__(self, transport: FormationTransport, *, trust: Callable[[], str],
                 limits: ProxyLimits | None = None, secret: str | None = None,
                 task_trust: Callable[[str], str | None] | None = None) -> None:
        self._transport = transport
        self._allow = transport.allow
        # Two views made once: per request, picking one is all the trust costs.
        self._trusted = transport.with_trust(TRUSTED)
        self._untrusted = transport.with_trust(UNTRUSTED)
        self._trust = trust
        self._task_trust = task_trust
        self._limits = limits or ProxyLimits()
        self._secret = secret if secret is not None else secrets.token_urlsafe(32)
        self._credentials = f"{USER}:{self._secret}".encode("ascii")
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._urls: dict[str, httpx.URL] = {}
        self._closing = False
        self._timeouts = {"connect": self._limits.connect_seconds, "read": None,
                          "write": None, "pool": self._limits.connect_seconds}

    def __repr__(self) -> str:  # never the secret
        return f"ForwardProxy(port={self._port})"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the forward proxy has not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://murmur:<secret>@127.0.0.1:<port>``, for the agent's environment."""
        return proxy_url(self._secret, self.port)

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the proxy variables set and NO_PROXY gone (see proxy_environment)."""
        return proxy_environment(env, self.url)

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` (bound to loopback by the caller), else on a new port."""
        if sock is not None:
            self._server = await asyncio.start_server(
                self._serve, sock=sock, limit=self._limits.head_bytes)
        else:
            self._server = await asyncio.start_server(
                self._serve, host="127.0.0.1", port=0, limit=self._limits.head_bytes)
        self._port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and end every open connection, tunnels included."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ForwardProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # One connection -----------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._converse(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass                            # the agent went away
        except asyncio.CancelledError:
            if not self._closing:           # ours when the proxy closes; anyone else's goes on
                raise
        except Exception as exc:  # noqa: BLE001 - one connection's bug must not end the proxy
            _log.error("forward proxy: a connection failed: %s: %s", type(exc).__name__,
                       self._transport.scrub(str(exc)))
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _converse(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        """Requests and answers until the connection ends; an answer the proxy gives
        itself (raised as an :class:`_Answer`) ends it."""
        try:
            if len(self._connections) > self._limits.connections:
                raise _Answer(503, "too_many_connections",
                              "the forward proxy has no room for another connection")
            while await self._exchange(reader, writer):
                pass
        except _Answer as answer:
            writer.write(answer.encode())
            await _linger(reader, writer)

    async def _exchange(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; whether the connection stays open for another."""
        head = await self._read_head(reader)
        if head is None:
            return False
        if not self._authorized(head):
            raise _Answer(407, "proxy_auth_required",
                          "this proxy needs the credentials in HTTP_PROXY",
                          ((b"Proxy-Authenticate", PROXY_AUTHENTICATE.encode()),))
        if head.method == _CONNECT:
            await self._tunnel(head, reader, writer)
            return False
        return await self._forward(head, reader, writer)

    async def _read_head(self, reader: asyncio.StreamReader) -> RequestHead | None:
        """The next head; ``None`` when the agent closed the connection between requests
        (or mid-head)."""
        try:
            async with asyncio.timeout(self._limits.head_seconds):
                data = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            raise _Answer(431, "head_too_large", f"a request head may have at most "
                          f"{self._limits.head_bytes} bytes") from None
        except TimeoutError:
            raise _Answer(408, "request_timeout", f"the request head did not arrive within "
                          f"{self._limits.head_seconds:g} s") from None
        return parse_head(data[:-4])

    def _authorized(self, head: RequestHead) -> bool:
        values = head.values(b"proxy-authorization")
        if len(values) != 1:
            return False
        scheme, _, credentials = values[0].partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(decoded, self._credentials)

    # Absolute-form http:// ------------------------------------------------------------

    async def _forward(self, head: RequestHead, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        url = self._url(head.target.decode("ascii"))
        length = _body_length(head, self._limits.body_bytes)
        if length != 0 and head.minor == 1 and b"100-continue" in (
                value.lower() for value in head.values(b"expect")):
            writer.write(_CONTINUE)
        body = await self._read_body(reader, length)
        request = _request(head, url, body, self._timeouts)
        response = await self._send(request, self._task_of(head))
        keep_alive = head.minor == 1 and b"close" not in head.connection_tokens()
        return await _relay(response, url, head, writer, keep_alive)

    def _url(self, target: str) -> httpx.URL:
        """The target's URL, checked and parsed once per text (agents repeat a few URLs,
        and parsing one costs more than the rest of the head); the verdict depends on
        the text alone."""
        url = self._urls.get(target)
        if url is None:
            url = _target_url(target)
            if len(self._urls) < _URL_CACHE:
                self._urls[target] = url
        return url

    async def _read_body(self, reader: asyncio.StreamReader, length: int | None) -> bytes:
        if length == 0:
            return b""
        try:
            async with asyncio.timeout(self._limits.body_seconds):
                if length is None:
                    return await _read_chunked(reader, self._limits.body_bytes)
                return await reader.readexactly(length)
        except TimeoutError:
            raise _Answer(408, "request_timeout",
                          f"the request body did not arrive within "
                          f"{self._limits.body_seconds:g} s") from None

    def _task_of(self, head: RequestHead) -> tuple[str, str] | None:
        """(task id, its trust) when ``Proxy-Murmur-Task`` names a task the member holds
        now (the agent process names the task a request is for; a name it makes up is
        ignored, and naming another live task gains nothing: the same code runs both)."""
        values = head.values(TASK_HEADER)
        if len(values) != 1 or self._task_trust is None:
            return None
        task = values[0].decode("latin-1")
        trust = self._task_trust(task) if len(task) <= 64 else None
        return (task, trust) if trust is not None else None

    async def _send(self, request: httpx.Request,
                    task: tuple[str, str] | None = None) -> httpx.Response:
        """``request`` through the member's FormationTransport; every refusal and
        failure as the agent's answer, naming a member but never a door's address."""
        trust = task[1] if task is not None else self._trust()
        view = self._trusted if trust == TRUSTED else self._untrusted
        calling = CALLING_TASK.set(task[0] if task is not None else None)
        try:
            return await view.handle_async_request(request)
        except FormationRefused:
            raise _refused_virtual() from None
        except EgressRefused as exc:
            raise _Answer(403, "egress_refused", str(exc)) from None
        except DoorUnavailable as exc:
            raise _Answer(502, "door_unavailable", str(exc)) from None
        except httpx.TransportError as exc:
            callee = exact_virtual_name(request.url.host)
            if callee is not None and callee in view.callees:
                raise _Answer(502, "door_unavailable",
                              f"member {callee!r}'s door cannot be reached "
                              f"({type(exc).__name__})") from None
            raise _Answer(502, "upstream_unavailable",
                          f"{_authority(request.url)} cannot be reached: "
                          f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a hook's or directory's bug, logged
            _log.error("forward proxy: a request failed: %s: %s", type(exc).__name__,
                       view.scrub(str(exc)))
            raise _Answer(500, "proxy_error",
                          "the forward proxy failed; the member's log says why") from None
        finally:
            CALLING_TASK.reset(calling)

    # CONNECT --------------------------------------------------------------------------

    async def _tunnel(self, head: RequestHead, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        authority = head.target.decode("ascii")
        if names_formation(authority):
            raise _refused_virtual()        # virtual addresses are http:// only
        match = _AUTHORITY.fullmatch(authority)
        if match is None or not 0 < int(match[2]) < 65536:
            raise _bad_request("CONNECT needs host:port")
        host, port = match[1].strip("[]"), int(match[2])
        try:
            allowed = self._allow.allows(httpx.URL(f"https://{authority}/"))
        except (httpx.InvalidURL, UnicodeError):
            raise _bad_request("CONNECT needs host:port") from None
        if not allowed:
            raise _Answer(403, "egress_refused",
                          f"refused: capabilities.network.allow does not allow {host}:{port}")
        try:
            async with asyncio.timeout(self._limits.connect_seconds):
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise _Answer(502, "upstream_unavailable",
                          f"{host}:{port} cannot be reached: {type(exc).__name__}") from None
        try:
            writer.write(_ESTABLISHED)
            await _splice(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()


# --------------------------------------------------------------------------------------
# 5. Targets, answers and tunnels


def _target_url(target: str) -> httpx.URL:
    """The URL of an absolute-form ``http://`` target, refused before its body is read
    when it names ``formation.invalid`` in any but the exact form. The check reads the
    URL *text*, as FormationClient does: httpx folds case and drops ``:80`` when it
    parses, after which ``CODER.formation.invalid:80`` would pass for a callee's address.
    FormationTransport repeats every check it still can on the parsed URL."""
    try:
        check_raw_url(target)
    except FormationRefused:
        raise _refused_virtual() from None
    if target[:7].lower() != "http://":
        raise _bad_request("this proxy takes an absolute http:// URL, or CONNECT host:port")
    try:
        return httpx.URL(target)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        if names_formation(target):
            raise _refused_virtual() from None
        raise _bad_request("the request URL cannot be parsed") from None


def _request(head: RequestHead, url: httpx.URL, body: bytes,
             timeouts: dict[str, float | None]) -> httpx.Request:
    """The request FormationTransport gets: the agent's headers minus the dropped ones,
    ``Host`` from the target, and ``Content-Length`` as httpx itself would set it
    (built from a stream, which skips httpx's header defaults: a third of the cost)."""
    method = head.method.decode("ascii")
    headers = [(b"Host", url.netloc), *_forwarded(head)]
    if body or method in _BODY_METHODS:
        headers.append((b"Content-Length", b"%d" % len(body)))
    return httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body),
                         extensions={"timeout": timeouts})


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


def _authority(url: httpx.URL) -> str:
    return f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"


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


async def _relay(response: httpx.Response, url: httpx.URL, head: RequestHead,
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


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After an answer that left the request unread: end the writing side, then read
    and drop what the agent still sends (bounded in bytes and time). Closing a socket
    with unread bytes resets it, and a reset can destroy the answer before the agent
    has read it."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        dropped = 0
        async with asyncio.timeout(_LINGER_SECONDS):
            while dropped < _LINGER_BYTES and (chunk := await reader.read(_PIPE_CHUNK)):
                dropped += len(chunk)


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
        while chunk := await source.read(_PIPE_CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        return False
    return True
