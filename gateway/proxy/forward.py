"""The forward proxy: virtual addresses and egress for any HTTP client.

An agent that runs in a process of its own reaches the formation and the network only
through its member's forward proxy, an HTTP/1.1 proxy on ``127.0.0.1:<port>`` that the
agent's environment names (:func:`proxy_environment`). In order:

1. the bounds (:class:`ProxyLimits`);
2. :class:`ForwardProxy`: its listener, then its connections, each going: the head, read
   under a size bound and a deadline; ``Proxy-Authorization: Basic murmur:<secret>``
   compared in constant time, else 407; then the target. An absolute-form ``http://``
   URL is handed, with its body, to the member's own
   :class:`~gateway.proxy.formation.FormationTransport` (the five steps for a virtual
   address, the allow-list and no token for any other host: one implementation, not a
   copy); ``CONNECT host:port`` is a TCP tunnel where the same allow-list admits it;
3. what an error names of a target, and the linger after an answer of the proxy's own.

The rest of the forward proxy sits beside it: ``forward_request`` (the head and body,
the request the transport gets, the answers the proxy gives itself), ``forward_relay``
(the answer, relayed chunk by chunk as it arrives with its framing made anew for the
agent's connection: ``Content-Length`` as received, else chunked) and ``forward_tunnel``
(``CONNECT``: its checks and the splice).

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
import logging
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from gateway.proxy.door_hop import DoorConnections, HopFailed
from gateway.proxy.env import USER, proxy_environment, proxy_url
from gateway.proxy.formation import (
    CALLING_TASK,
    TRUSTED,
    UNTRUSTED,
    FormationTransport,
    VirtualTarget,
)
from gateway.proxy.forward_relay import relay as _relay
from gateway.proxy.forward_relay import relay_hop as _relay_hop
from gateway.proxy.forward_request import TASK_HEADER, RequestHead, read_head
from gateway.proxy.forward_request import ForwardAnswer as _Answer
from gateway.proxy.forward_request import body_length as _body_length
from gateway.proxy.forward_request import forwarded_to_target as _forwarded_to_target
from gateway.proxy.forward_request import read_chunked as _read_chunked
from gateway.proxy.forward_request import refused_virtual as _refused_virtual
from gateway.proxy.forward_request import target_url as _target_url
from gateway.proxy.forward_request import transport_request as _transport_request
from gateway.proxy.forward_tunnel import PIPE_CHUNK as _PIPE_CHUNK
from gateway.proxy.forward_tunnel import tunnel as _tunnel
from gateway.proxy.proxy_errors import (
    CallLimitReached,
    DoorUnavailable,
    EgressRefused,
    FormationRefused,
    ModelBoundReached,
)
from gateway.proxy.virtual_names import exact_virtual_name

_log = logging.getLogger(__name__)

PROXY_AUTHENTICATE: Final = 'Basic realm="murmur"'


# --------------------------------------------------------------------------------------
# 1. Bounds


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
# 2. The proxy

_CONNECT: Final = b"CONNECT"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
#: How long, and how many bytes, the proxy reads and drops after an answer of its own.
_LINGER_SECONDS: Final = 1.0
_LINGER_BYTES: Final = 256 * 1024
#: Parsed target URLs kept per proxy (see ForwardProxy._url); past it, parsed each time.
_URL_CACHE: Final = 256


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
        inference = transport.inference
        self._endpoint = None if inference is None else inference.origin[1:]
        # Two views made once: per request, picking one is all the trust costs.
        self._trusted = transport.with_trust(TRUSTED)
        self._untrusted = transport.with_trust(UNTRUSTED)
        self._trust = trust
        self._task_trust = task_trust
        self._limits = limits or ProxyLimits()
        self._secret = secret if secret is not None else secrets.token_urlsafe(32)
        self._credentials = f"{USER}:{self._secret}".encode("ascii")
        self._authorization = b"Basic " + base64.b64encode(self._credentials)
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._urls: dict[str, tuple[httpx.URL, VirtualTarget | None]] = {}
        self._doors = DoorConnections(connect_seconds=self._limits.connect_seconds)
        self._deadlines = _ReadDeadlines(_sweep_tick(self._limits))
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
        self._doors.close()
        self._deadlines.close()
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
        # asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP, and a listener
        # handed in as ``sock`` is made with protocol 0: without it, a chunked answer's
        # head, chunk and end each waited on the agent's delayed ACK (40 ms a request).
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
            await _tunnel(head, reader, writer, self._allow, self._limits.connect_seconds,
                          self._endpoint)
            return False
        return await self._forward(head, reader, writer)

    async def _read_head(self, reader: asyncio.StreamReader) -> RequestHead | None:
        """The next head; ``None`` when the agent closed the connection between requests
        (or mid-head)."""
        deadlines = self._deadlines
        reading = deadlines.begin(self._limits.head_seconds)
        try:
            data = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            raise _Answer(431, "head_too_large", f"a request head may have at most "
                          f"{self._limits.head_bytes} bytes") from None
        except asyncio.CancelledError:
            if not deadlines.passed(reading):
                raise
            raise _Answer(408, "request_timeout", f"the request head did not arrive within "
                          f"{self._limits.head_seconds:g} s") from None
        finally:
            deadlines.end(reading)
        return read_head(data)

    def _authorized(self, head: RequestHead) -> bool:
        values = head.values(b"proxy-authorization")
        if len(values) != 1:
            return False
        if hmac.compare_digest(values[0], self._authorization):
            return True                     # as clients write it: no decoding
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
        url, virtual = self._url(head.target.decode("ascii"))
        length = _body_length(head, self._limits.body_bytes)
        if length != 0 and head.minor == 1 and b"100-continue" in (
                value.lower() for value in head.values(b"expect")):
            writer.write(_CONTINUE)
        body = await self._read_body(reader, length)
        keep_alive = head.minor == 1 and b"close" not in head.named
        if virtual is not None:
            relayed = await self._hop(virtual, url, head, body, writer, keep_alive)
            if relayed is not None:
                return relayed
        request = _transport_request(head, url, body, self._timeouts)
        response = await self._send(request, self._task_of(head))
        return await _relay(response, url, head, writer, keep_alive)

    def _url(self, target: str) -> tuple[httpx.URL, VirtualTarget | None]:
        """The target's URL, checked and parsed once per text (agents repeat a few URLs,
        and parsing one costs more than the rest of the head), and what it is when it is
        exactly a callee's virtual address; the verdict depends on the text alone."""
        known = self._urls.get(target)
        if known is None:
            url = _target_url(target)
            known = url, self._transport.virtual_target(url)
            if len(self._urls) < _URL_CACHE:
                self._urls[target] = known
        return known

    async def _hop(self, virtual: VirtualTarget, url: httpx.URL, head: RequestHead,
                   body: bytes, writer: asyncio.StreamWriter, keep_alive: bool
                   ) -> bool | None:
        """A request to a callee whose door the member knows, carried in bytes on a
        kept-alive connection to that door (``door_hop``): stamped by the member's
        FormationTransport as every request to a member is. ``None`` when the door is
        not known yet: the request then goes the httpx way, which waits for it."""
        task = self._task_of(head)
        view = self._view(task)
        calling = CALLING_TASK.set(task[0] if task is not None else None)
        try:
            headers, keys = _forwarded_to_target(head)
            hop = view.member_hop(virtual, head.method.decode("ascii"), headers, body, keys)
        except Exception as exc:  # noqa: BLE001 - mapped to the agent's answer
            raise self._failure(exc, view, url) from None
        finally:
            CALLING_TASK.reset(calling)
        if hop is None:
            return None
        try:
            connection, answer = await self._doors.send(hop.address, hop.head + body)
            view.call_answered(virtual.callee, answer.status, hop.started)
            return await _relay_hop(self._doors, connection, answer, lambda: url, head,
                                    writer, keep_alive)
        except HopFailed as exc:            # nothing was written to the agent yet
            view.call_unreachable(virtual.callee)
            raise _Answer(502, "door_unavailable",
                          f"the door of member {virtual.callee!r} cannot be reached "
                          f"({exc.kind})") from None

    async def _read_body(self, reader: asyncio.StreamReader, length: int | None) -> bytes:
        if length == 0:
            return b""
        deadlines = self._deadlines
        reading = deadlines.begin(self._limits.body_seconds)
        try:
            if length is None:
                return await _read_chunked(reader, self._limits.body_bytes)
            return await reader.readexactly(length)
        except asyncio.CancelledError:
            if not deadlines.passed(reading):
                raise
            raise _Answer(408, "request_timeout",
                          f"the request body did not arrive within "
                          f"{self._limits.body_seconds:g} s") from None
        finally:
            deadlines.end(reading)

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

    def _view(self, task: tuple[str, str] | None) -> FormationTransport:
        """The transport's view for a request's trust: its task's, else the member's."""
        trust = task[1] if task is not None else self._trust()
        return self._trusted if trust == TRUSTED else self._untrusted

    async def _send(self, request: httpx.Request,
                    task: tuple[str, str] | None = None) -> httpx.Response:
        """``request`` through the member's FormationTransport; every refusal and
        failure as the agent's answer, naming a member but never a door's address."""
        view = self._view(task)
        calling = CALLING_TASK.set(task[0] if task is not None else None)
        try:
            return await view.handle_async_request(request)
        except Exception as exc:  # noqa: BLE001 - mapped to the agent's answer
            raise self._failure(exc, view, request.url) from None
        finally:
            CALLING_TASK.reset(calling)

    @staticmethod
    def _failure(exc: Exception, view: FormationTransport, url: httpx.URL) -> _Answer:
        """The agent's answer to a request the transport refused or could not send."""
        if isinstance(exc, FormationRefused):
            return _refused_virtual()
        if isinstance(exc, EgressRefused):
            return _Answer(403, "egress_refused", str(exc))
        if isinstance(exc, CallLimitReached):
            return _Answer(403, "limit_reached", str(exc))
        if isinstance(exc, ModelBoundReached):
            return _Answer(403, "model_refused", str(exc),
                           detail={"code": exc.code, "key": exc.key, "fields": exc.fields})
        if isinstance(exc, DoorUnavailable):
            return _Answer(502, "door_unavailable", str(exc))
        if isinstance(exc, httpx.TransportError):
            callee = exact_virtual_name(url.host)
            if callee is not None and callee in view.callees:
                return _Answer(502, "door_unavailable",
                               f"the door of member {callee!r} cannot be reached "
                               f"({type(exc).__name__})")
            return _Answer(502, "upstream_unavailable",
                           f"{_authority(url)} cannot be reached: "
                           f"{type(exc).__name__}: {exc}")
        # A hook's or directory's bug: logged, scrubbed.
        _log.error("forward proxy: a request failed: %s: %s", type(exc).__name__,
                   view.scrub(str(exc)))
        return _Answer(500, "proxy_error", "the forward proxy failed; the member's log says why")


class _ReadDeadlines:
    """The deadlines of the proxy's reads, on one timer. A read notes its task and when
    it is due (:meth:`begin`, a dict entry: a timer of its own cost the loop a timer's
    start and cancel on every read, 1.3 us of a request's ~48 here); while any read
    waits, a sweep every ``tick`` seconds cancels the late ones, so a read's deadline
    passes within ``tick`` after it is due. The read then asks :meth:`passed` (which
    undoes the cancellation) and answers 408, and notes its end (:meth:`end`) whatever
    happened."""

    __slots__ = ("_due", "_late", "_sweeping", "_tick")

    def __init__(self, tick: float) -> None:
        self._tick = tick
        self._due: dict[asyncio.Task[Any], float] = {}
        self._late: set[asyncio.Task[Any]] = set()
        self._sweeping: asyncio.TimerHandle | None = None

    def begin(self, seconds: float) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert task is not None
        loop = task.get_loop()
        self._due[task] = loop.time() + seconds
        if self._sweeping is None:
            self._sweeping = loop.call_later(self._tick, self._sweep, loop)
        return task

    def passed(self, task: asyncio.Task[Any]) -> bool:
        """Whether the deadline cancelled the read (then the cancellation is undone)."""
        if task not in self._late:
            return False
        self._late.discard(task)
        task.uncancel()
        return True

    def end(self, task: asyncio.Task[Any]) -> None:
        self._due.pop(task, None)
        self._late.discard(task)

    def close(self) -> None:
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        due = self._due
        for task in [task for task, at in due.items() if at <= now]:
            del due[task]
            self._late.add(task)
            task.cancel()
        self._sweeping = loop.call_later(self._tick, self._sweep, loop) if due else None


def _sweep_tick(limits: ProxyLimits) -> float:
    """How often the read deadlines are swept: a quarter of the shorter one, between
    10 ms and 1 s (the defaults: 1 s, so a head is cut off 10 to 11 s after it began)."""
    return min(1.0, max(0.01, min(limits.head_seconds, limits.body_seconds) / 4))


# --------------------------------------------------------------------------------------
# 3. Targets in errors, and the linger


def _authority(url: httpx.URL) -> str:
    return f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"


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

