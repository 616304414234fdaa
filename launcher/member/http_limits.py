"""The door's connections under floods: :class:`DoorLimits`, the bounds, and
:class:`DoorHttpProtocol`, uvicorn's httptools protocol that keeps them.

In order: the bounds, the connection cap they default to and the accept batch the cap
sets; :class:`ConnectionBook`, what every connection of one server shares (how many are
open, which to close for room, the sweep that ends overdue ones); the protocol, whose
overrides count a head's bytes, make an absolute-form target's authority the ``Host``
(so DoorAuth's DNS-rebinding check reads it), and whose state says where a connection
is (waiting for a head, receiving a body, busy); :func:`protocol_for`, the protocol
class bound to one server's book. Each bound's default and the reasons are in
``docs/member-runtime.md`` ("Connections and floods").

The request path stays cheap: two overrides run per request (``data_received``, which
adds a head's reads up, and ``on_message_complete``, which marks where the next head
begins), with no clock read. Deadlines are not timers: the server's tick sweeps its
connections and reads each one's phase from uvicorn's own state (see
:meth:`ConnectionBook.sweep`), so nothing is armed or cancelled per request.
"""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import socket
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

#: The default cap on open connections, lowered to half the soft descriptor limit.
DEFAULT_CONNECTIONS = 512

_HEAD, _BODY, _BUSY = 0, 1, 2
_now = time.monotonic
_log = logging.getLogger("uvicorn.error")  # the server's log, rate-limited while it runs


@dataclass(frozen=True)
class DoorLimits:
    """The bounds the door's server keeps; the defaults are the documented ones."""

    #: A request head (request line and headers) past this many bytes gets 431.
    head_bytes: int = 64 * 1024
    #: A head must be complete this long after the connection opened or its last answer.
    head_seconds: float = 10.0
    #: A request's whole body must have arrived this long after its head.
    body_seconds: float = 30.0
    #: Open connections; lowered to half the soft RLIMIT_NOFILE (see connection_cap).
    connections: int = DEFAULT_CONNECTIONS
    #: Lines of one kind the server's own log ("uvicorn.error") lets through per window.
    log_lines: int = 5
    #: asyncio's "socket.accept() out of system resource" lines let through per window.
    accept_log_lines: int = 1
    #: The window of both log limits; a count of what was held back ends each one.
    log_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("head_bytes", "connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("head_seconds", "body_seconds", "log_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0 seconds")
        if self.log_lines < 0 or self.accept_log_lines < 0:
            raise ValueError("log lines cannot be negative")


def connection_cap(wanted: int, soft_limit: int | None = None) -> int:
    """``wanted`` open connections, but at most half the soft descriptor limit: the
    other half is the member's own (records, the proxy's upstream sockets, agent code)."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return wanted
    return max(1, min(wanted, soft_limit // 2))


def stream_room(cap: int) -> int:
    """How many live streams the door may hold with ``cap`` connections: all but an
    eighth (at least 8) kept for new requests, so a caller holding streams never takes
    the last connection (gateway/door/streams.py makes room at that bound)."""
    return max(1, cap - max(8, cap // 8))


def accept_batch(cap: int) -> int:
    """How many connections asyncio accepts at one wake-up, before any of them is
    counted: a quarter of the cap (at least 8). uvicorn's 2048 let one wake-up take
    descriptors past the limit before the cap could close any."""
    return max(8, cap // 4)


class ConnectionBook:
    """What one server's connections share: the limits, the cap, how many are open."""

    def __init__(self, limits: DoorLimits, cap: int) -> None:
        self.limits = limits
        self.cap = cap
        self.open = 0
        self._timeouts = (limits.head_seconds, limits.body_seconds, math.inf)

    def admit(self, newcomer: DoorHttpProtocol) -> None:
        """Count ``newcomer``; past the cap, close the connection idle the longest (no
        request in progress), or the newcomer when every other one is busy."""
        self.open += 1
        if self.open <= self.cap:
            return
        victim = self._oldest_idle(newcomer)
        if victim is None:
            _log.warning("Connection limit (%d) reached with every connection busy; "
                         "a new connection was closed.", self.cap)
            newcomer.close_for_limit()
            return
        _log.warning("Connection limit (%d) reached; the connection idle the longest "
                     "was closed.", self.cap)
        victim.close_for_limit()

    def _oldest_idle(self, newcomer: DoorHttpProtocol) -> DoorHttpProtocol | None:
        # A scan, only at the cap: keeping an ordered index would cost every request. A
        # connection whose state changed since the last sweep counts as the newest.
        oldest: DoorHttpProtocol | None = None
        oldest_since = math.inf
        for connection in newcomer.connections:
            if (isinstance(connection, DoorHttpProtocol) and connection is not newcomer
                    and connection.counted):
                state = connection.state()
                if state[1] != _HEAD:
                    continue
                since = connection.since if connection.seen == state else _now()
                if oldest is None or since < oldest_since:
                    oldest, oldest_since = connection, since
        return oldest

    def sweep(self, connections: set[Any], now: float | None = None) -> int:
        """Close the connections whose head or body is overdue; how many were closed.

        A connection's phase is read from uvicorn's own state; the first sweep that sees
        a phase (of one request) starts its clock (a new connection's starts when it
        opens), so a connection is closed at most two ticks after its deadline, with no
        work on the request path."""
        now = _now() if now is None else now
        timeouts = self._timeouts
        closed = 0
        for connection in list(connections):
            if not isinstance(connection, DoorHttpProtocol) or not connection.counted:
                continue
            state = connection.state()
            if connection.seen != state:
                connection.seen, connection.since = state, now
            elif now - connection.since > timeouts[state[1]]:
                connection.close_overdue(state[1])
                closed += 1
        return closed


class DoorHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head, head and body deadlines (kept
    by :meth:`ConnectionBook.sweep`), a place in the connection cap, no ``pip install``
    hint for an upgrade it does not serve, and Nagle's algorithm off."""

    book: ClassVar[ConnectionBook]

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.counted = False
        #: The state (request, phase) the last sweep saw, and since when it has held.
        self.seen: tuple[object, int] = (None, _HEAD)
        self.since = _now()
        #: The request whose message the parser completed last: while it is still the
        #: current one (uvicorn makes a new one at each head), the parser is in a head.
        self._done: object = None
        self._head_bytes = 0
        self._head_limit = self.book.limits.head_bytes

    def state(self) -> tuple[object, int]:
        """(the current request, its phase): waiting for a head (none yet, or answered),
        receiving its body, or busy (its whole body read, its answer not complete)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return cycle, _HEAD
        return cycle, _BODY if cycle.more_body else _BUSY

    # --- the connection and the cap

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        _no_delay(transport)
        self.since = _now()
        self.counted = True
        self.book.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        super().connection_lost(exc)

    def _uncount(self) -> None:
        if self.counted:
            self.counted = False
            self.book.open -= 1

    def close_for_limit(self) -> None:
        self._uncount()
        self.transport.close()

    def close_overdue(self, phase: int) -> None:
        if self.transport.is_closing():  # closed by uvicorn, not yet told it is lost
            return
        if phase == _HEAD:
            _log.warning("A request head was not complete in %g s; the connection was "
                         "closed.", self.book.limits.head_seconds)
        else:
            _log.warning("A request body was not complete in %g s; the connection was "
                         "closed.", self.book.limits.body_seconds)
        self.close_for_limit()

    # --- the head's size

    def data_received(self, data: bytes) -> None:
        # The base class is called by name, not through super(): this runs at every read.
        if self.cycle is self._done:  # in a head: count it
            room = self._head_limit - self._head_bytes
            size = len(data)
            self._head_bytes += size
            if size > room:
                self._past_head_room(data, room)
                return
        _base_data_received(self, data)

    def _past_head_room(self, data: bytes, room: int) -> None:
        # The read may hold the end of the head and the start of a body (or of the next
        # request): feed what is left of the head's room, and refuse only if no head
        # was completed in it; what follows is fed, and counted, as any read is.
        view = memoryview(data)
        before = self.cycle
        if room > 0:
            super().data_received(view[:room])  # type: ignore[arg-type]
            if self.transport.is_closing():
                return
        if self.cycle is before:
            self._refuse_head()
        else:
            self.data_received(view[room:])  # type: ignore[arg-type]

    def _refuse_head(self) -> None:
        _log.warning("A request head passed %d bytes; it was answered 431.",
                     self._head_limit)
        if self.cycle is None or self.cycle.response_complete:  # nothing else being sent
            message = b"Request header fields too large"
            content = [STATUS_LINE[431]]
            for name, value in self.server_state.default_headers:
                content.extend([name, b": ", value, b"\r\n"])
            content.extend([b"content-type: text/plain; charset=utf-8\r\n",
                            b"content-length: %d\r\n" % len(message),
                            b"connection: close\r\n\r\n", message])
            self.transport.write(b"".join(content))
        self.close_for_limit()

    def on_headers_complete(self) -> None:
        # A target in absolute form (``GET http://host:port/ HTTP/1.1``) names the host
        # the request is for, and HTTP says the server must use it, not ``Host``: it
        # becomes the ``Host`` DoorAuth checks (DNS rebinding), so the check cannot be
        # gone around by naming a loopback Host beside another authority.
        if self.url[:1] != b"/" and self.url != b"*":
            self._authority_as_host()
        _base_headers_complete(self)

    def _authority_as_host(self) -> None:
        try:
            parsed = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            authority = self.url  # authority-form, or not a URL: matches no Host
        else:
            host = parsed.host or b""
            if b":" in host:
                host = b"[" + host + b"]"
            authority = host + (b":%d" % parsed.port if parsed.port is not None else b"")
        self.headers[:] = [item for item in self.headers if item[0] != b"host"]
        self.headers.append((b"host", authority))

    def on_message_complete(self) -> None:
        self._done = self.cycle  # what the parser reads next is the next head
        self._head_bytes = 0
        _base_message_complete(self)

    def _unsupported_upgrade_warning(self) -> None:
        # uvicorn adds a line telling the operator to install a websocket library; the
        # door serves no websocket (ws="none"), so the hint is wrong and doubles the log.
        self.logger.warning("Unsupported upgrade request.")


_base_data_received = HttpToolsProtocol.data_received
_base_message_complete = HttpToolsProtocol.on_message_complete
_base_headers_complete = HttpToolsProtocol.on_headers_complete


def _no_delay(transport: Any) -> None:
    # asyncio turns Nagle's algorithm off only for a socket made with proto=IPPROTO_TCP;
    # the door's is made with proto 0. With it on, an answer written in two pieces (head,
    # then body) waits for the caller's delayed ACK: 40 ms on every keep-alive request.
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def protocol_for(book: ConnectionBook) -> type[DoorHttpProtocol]:
    """The protocol class uvicorn makes one server's connections with (its ``http=``)."""
    return type("BoundDoorHttpProtocol", (DoorHttpProtocol,), {"book": book})
