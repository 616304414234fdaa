"""Server-Sent Events: the one home of both directions.

In this order: the writer's side (a stream's headers, the keep-alive comment, one event
with its payload made safe for every client's line splitting; :class:`KeepAlive`, one
timer for every open stream of a door; :func:`serve_stream`, a door's stream from its
first byte to its end), then the reader's side (:class:`SseEvents`, the ``data`` of each
event from lines as they come, for text or bytes; :func:`event_data` and
:func:`aevent_data` over a sync or an async iterable of lines). The door writes; the
call-member client, the relay's upstream client and ``mur`` read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, AnyStr, Generic, Protocol

from gateway.a2a.jsonrpc import RpcError
from gateway.door.streams import StreamTicket
from gateway.http_io import wait_disconnect
from gateway.types import Headers, Receive, Send

log = logging.getLogger("murmur.door")

# --- writing ------------------------------------------------------------------------------

SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]


#: A comment line: clients skip it, and it keeps an idle stream from timing out.
SSE_KEEPALIVE = b": keep-alive\n\n"
#: Characters JSON writes raw that some SSE clients split lines on (httpx's line
#: reader, and so a2a-sdk's client, splits like ``str.splitlines``): NEL, LINE SEPARATOR,
#: PARAGRAPH SEPARATOR, as UTF-8, and their JSON escapes. In UTF-8 JSON text these bytes
#: occur only inside strings, where the escape means the same character.
_SSE_LINE_BREAKS = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"),
                    (b"\xe2\x80\xa9", b"\\u2029"))


def _sse_safe(payload: bytes) -> bytes:
    """``payload`` with no character an SSE client could read as a line break (the
    control characters among them are escaped by JSON already)."""
    if payload.isascii():
        return payload
    for raw, escaped in _SSE_LINE_BREAKS:
        if raw in payload:
            payload = payload.replace(raw, escaped)
    return payload


def sse_event(payload: bytes, event: str | None = None) -> bytes:
    """One SSE event carrying ``payload`` (compact JSON: it holds no raw line break)."""
    payload = _sse_safe(payload)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode("ascii") + b"\ndata: " + payload + b"\n\n"


class _SseWriter:
    """The one writer of a stream's body. A keep-alive comment is sent by a task of its
    own (:meth:`beat`) and never overlaps an event: an event waits for a comment in
    flight, and no comment starts while an event is being written."""

    __slots__ = ("_send", "_loop", "_writing", "_beat", "last")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._writing = False
        self._beat: asyncio.Task[None] | None = None
        self.last = self._loop.time()

    async def write(self, body: bytes) -> None:
        beat = self._beat
        if beat is not None and not beat.done():
            with contextlib.suppress(Exception):  # a failed comment: the client left
                await beat
        self._writing = True
        try:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
        finally:
            self._writing = False
        self.last = self._loop.time()

    def beat(self) -> None:
        """Send a comment now, unless something is being written anyway."""
        if self._writing or (self._beat is not None and not self._beat.done()):
            return
        self._beat = self._loop.create_task(self._comment())
        # A failed comment means the client left; the disconnect watcher ends the stream.
        self._beat.add_done_callback(_ignore_outcome)

    async def _comment(self) -> None:
        await self._send({"type": "http.response.body", "body": SSE_KEEPALIVE,
                          "more_body": True})
        self.last = self._loop.time()

    async def close(self) -> None:
        """No more comments: one in flight is cancelled and awaited."""
        beat = self._beat
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await beat


def _ignore_outcome(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


#: The longest a door's stream stays silent (seconds) before it sends an SSE comment:
#: half the 5 s read timeout of a2a-sdk's default client (httpx's default), a quarter of
#: the 10 s the issue allows. Silent streams get a comment every 1.25 to 2.5 s. Read when
#: a door is built (:meth:`KeepAlive.for_door`), so this is the one place to change it.
SSE_KEEPALIVE_SECONDS = 2.5


class KeepAlive:
    """One timer for every open stream of a door: every ``interval / 2`` seconds,
    each stream silent for that long gets a comment, so none stays silent for
    ``interval``. Measured: a timer (or a task) per stream added 7-20% to a short
    SendStreamingMessage; a shared one costs a set insertion."""

    def __init__(self, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"keepalive must be a positive number of seconds, got {interval!r}")
        self._step = interval / 2
        self._writers: set[_SseWriter] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def for_door(cls, interval: float | None = None) -> KeepAlive:
        """A door's timer: ``interval`` seconds, else :data:`SSE_KEEPALIVE_SECONDS` as
        it is now (a test sets it small)."""
        return cls(SSE_KEEPALIVE_SECONDS if interval is None else interval)

    def add(self, writer: _SseWriter) -> None:
        self._writers.add(writer)
        loop = asyncio.get_running_loop()
        if self._timer is None or self._loop is not loop:  # none yet, or a loop now gone
            self._loop = loop
            self._timer = loop.call_later(self._step, self._tick)

    def discard(self, writer: _SseWriter) -> None:
        self._writers.discard(writer)  # the timer stops itself once no stream is left

    def _tick(self) -> None:
        assert self._loop is not None
        if not self._writers:
            self._timer = None
            return
        silent_since = self._loop.time() - self._step
        for writer in list(self._writers):
            if writer.last <= silent_since:
                writer.beat()
        self._timer = self._loop.call_later(self._step, self._tick)


class StreamFraming(Protocol):
    """How a binding writes one stream event and a stream's closing error."""

    def event(self, result: Any) -> bytes: ...
    def error(self, error: RpcError) -> bytes: ...


async def serve_stream(receive: Receive, send: Send, events: AsyncIterator[Any],
                       keepalive: KeepAlive, framing: StreamFraming,
                       headers: Headers = SSE_HEADERS,
                       ticket: StreamTicket | None = None) -> None:
    """Send ``events`` as SSE, framed by ``framing``, until they end, the client goes
    away, or ``ticket`` is evicted for room (the stream then ends as if the task's
    events had); a comment keeps an idle stream alive (clients time out on silence)."""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
    except BaseException:
        await _close_events(events)  # never read: what it holds is let go all the same
        raise
    writer = _SseWriter(send)
    keepalive.add(writer)

    async def pump() -> None:
        try:
            async for result in events:
                await writer.write(framing.event(result))
                # Let the disconnect watcher run between events: a replayed backlog would
                # otherwise keep writing to a socket the client has closed.
                await asyncio.sleep(0)
                if watching.done():
                    return
        except RpcError as exc:
            await writer.write(framing.error(exc))
        except Exception:
            log.exception("stream failed")
            await writer.write(framing.error(RpcError("INTERNAL_ERROR")))

    pumping = asyncio.ensure_future(pump())
    watching = asyncio.ensure_future(wait_disconnect(receive))
    waits: set[asyncio.Future[Any]] = {pumping, watching}
    evicted = None
    if ticket is not None:
        evicted = asyncio.ensure_future(ticket.evicted.wait())
        waits.add(evicted)
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        keepalive.discard(writer)
        await writer.close()
        for task in waits:
            task.cancel()
        for task in waits:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await _close_events(events)
    if pumping in done or evicted in done:  # ended, or evicted for room: a clean end
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _close_events(events: AsyncIterator[Any]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


# --- reading ------------------------------------------------------------------------------


class SseEvents(Generic[AnyStr]):
    """The ``data`` of each event, fed one line at a time (without its line end):
    :meth:`line` returns an event's data when a blank line completes it, multi-line data
    joined with newlines; comments, ``event:``, ``id:`` and ``retry:`` lines are read
    past. :meth:`end` returns an event the stream ended inside of. The same for text
    and bytes: ``field``, ``space`` and ``newline`` are ``data:``, `` `` and ``\\n``
    of the lines' own type."""

    __slots__ = ("_field", "_space", "_newline", "_data")

    def __init__(self, field: AnyStr, space: AnyStr, newline: AnyStr) -> None:
        self._field: AnyStr = field
        self._space: AnyStr = space
        self._newline: AnyStr = newline
        self._data: list[AnyStr] = []

    def line(self, line: AnyStr) -> AnyStr | None:
        if not line:
            return self.end()
        if line.startswith(self._field):
            value = line[len(self._field):]
            self._data.append(value[1:] if value.startswith(self._space) else value)
        return None

    def end(self) -> AnyStr | None:
        if not self._data:
            return None
        data: AnyStr = self._newline.join(self._data)
        self._data = []
        return data

    def __len__(self) -> int:
        """The length of the event read so far (a reader bounds it)."""
        return sum(len(part) for part in self._data)


def text_events() -> SseEvents[str]:
    return SseEvents("data:", " ", "\n")


def byte_events() -> SseEvents[bytes]:
    return SseEvents(b"data:", b" ", b"\n")


def event_data(lines: Iterable[str]) -> Iterator[str]:
    """The ``data`` of each event in ``lines``."""
    events = text_events()
    for line in lines:
        data = events.line(line)
        if data is not None:
            yield data
    last = events.end()
    if last is not None:
        yield last


async def aevent_data(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """The ``data`` of each event in ``lines``, as each completes."""
    events = text_events()
    async for line in lines:
        data = events.line(line)
        if data is not None:
            yield data
    last = events.end()
    if last is not None:
        yield last
