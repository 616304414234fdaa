"""One upstream subscription per task, shared by every local subscriber of a gateway door.

A gateway door relays ``SubscribeToTask``; opened once per local subscriber, a hundred
subscribers of one slow task held a hundred upstream connections, and took the ones the
door's own calls needed. So a :class:`Fanout` holds the one upstream stream of a task and
copies each event to every subscriber, in this order:

1. the first subscriber's request opens the upstream stream (a refusal is its own
   answer); it reads every event from the first, the Task itself, or where the
   upstream's first event is not a Task (an A2A 0.3 upstream's update), the Task its
   ``opening`` makes of it first (:mod:`gateway.relay.opening`);
2. a later subscriber is given the task as the door reads it now (one ``GetTask``, its
   first event, as the specification has a subscription begin), then every event
   after it joined;
3. each event is observed by the door once (``on_event``), then queued for each
   subscriber; a subscriber more than ``backlog`` events behind is dropped (its stream
   ends; it may subscribe again), so a slow reader never holds the door's memory;
4. the upstream stream ending (or failing) ends every subscriber's stream the same way;
   the last subscriber leaving closes the upstream stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

#: How many events a subscriber may be behind before it is dropped.
BACKLOG: Final = 256

_END: Final = object()
_NOTHING: Final = object()


class _Subscriber:
    """One subscriber's events: an async iterator whose ``aclose`` (or end) leaves the
    fan-out, whether or not it was ever read (a stream whose client went away before its
    first event is never read)."""

    __slots__ = ("queue", "_fanout", "_first", "_opening", "_held", "_left")

    def __init__(self, fanout: Fanout, first: Callable[[], Awaitable[Any]] | None,
                 opening: Callable[[Any], Any] | None) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._fanout = fanout
        self._first = first
        self._opening = opening
        #: The upstream's first event, held while the Task made of it goes first.
        self._held: Any = _NOTHING
        self._left = False

    def __aiter__(self) -> _Subscriber:
        return self

    async def __anext__(self) -> Any:
        if self._left:
            raise StopAsyncIteration
        if self._held is not _NOTHING:
            item, self._held = self._held, _NOTHING
            return item
        try:
            if self._first is not None:
                first, self._first = self._first, None
                return await first()
            item = await self.queue.get()
        except BaseException:
            await self.aclose()
            raise
        if isinstance(item, BaseException):
            await self.aclose()
            raise item
        if item is _END:
            await self.aclose()
            raise StopAsyncIteration
        if self._opening is not None:
            opening, self._opening = self._opening, None
            task = opening(item)
            if task is not None:
                self._held = item
                return task
        return item

    async def aclose(self) -> None:
        if not self._left:
            self._left = True
            self._fanout._leave(self)


class Fanout:
    """The shared upstream stream of one task (see the module docstring)."""

    def __init__(self, upstream: AsyncIterator[Any], *, on_event: Callable[[Any], None],
                 on_close: Callable[[Fanout], None], backlog: int = BACKLOG) -> None:
        self._upstream = upstream
        self._on_event = on_event
        self._on_close = on_close
        self._backlog = backlog
        self._subscribers: set[_Subscriber] = set()
        self._pump: asyncio.Task[None] | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._subscribers)

    def join(self, first: Callable[[], Awaitable[Any]] | None = None, *,
             opening: Callable[[Any], Any] | None = None) -> AsyncIterator[Any]:
        """A subscriber's events: from the upstream's first (``first`` None: the
        subscriber that opened it), else ``first()``'s event, then what follows.
        ``opening``: given the first event read from the upstream, the event to send
        before it, or None."""
        subscriber = _Subscriber(self, first, opening)
        self._subscribers.add(subscriber)
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(
                self._run(), name="murmur-relay-fanout")
        return subscriber

    async def _run(self) -> None:
        ending: Any = _END
        try:
            async for event in self._upstream:
                self._on_event(event)
                for subscriber in list(self._subscribers):
                    self._offer(subscriber, event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every subscriber as is
            ending = exc
        finally:
            self._close()
            for subscriber in list(self._subscribers):
                subscriber.queue.put_nowait(ending)

    def _offer(self, subscriber: _Subscriber, event: Any) -> None:
        if subscriber.queue.qsize() >= self._backlog:
            self._subscribers.discard(subscriber)
            subscriber.queue.put_nowait(_END)
            return
        subscriber.queue.put_nowait(event)

    def _leave(self, subscriber: _Subscriber) -> None:
        self._subscribers.discard(subscriber)
        if not self._subscribers and self._pump is not None and not self._pump.done():
            self._pump.cancel()
            self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_close(self)
            aclose = getattr(self._upstream, "aclose", None)
            if aclose is not None:
                task = asyncio.get_running_loop().create_task(_quietly(aclose()))
                _CLOSING.add(task)
                task.add_done_callback(_CLOSING.discard)


_CLOSING: set[asyncio.Task[None]] = set()


async def _quietly(closing: Awaitable[Any]) -> None:
    with contextlib.suppress(Exception):
        await closing
