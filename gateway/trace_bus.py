"""TraceBus: the session's trace records, handed to sinks and to live watchers.

``emit(event, **fields)`` builds one record ``{"ts": ..., "event": ..., **fields}`` and gives
it to every sink (the launcher adds the ``trace.jsonl`` writer) and to every subscription
(``murmur.WatchSession`` streams them). A sink that fails is logged and kept; a record is
never lost for the others. The bus keeps the last ``backlog`` records so a watcher that
connects late first sees what came before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.redaction import redact

TraceRecord = dict[str, Any]
TraceSink = Callable[[TraceRecord], None]

log = logging.getLogger("murmur.trace")



_second_cache: list[Any] = [-1, ""]


def utc_timestamp() -> str:
    """ISO-8601 UTC with milliseconds and a ``Z``: ``2026-01-02T03:04:05.678Z``.

    The date-and-seconds part is formatted once a second: the door stamps every status
    change and every trace record, and a datetime per stamp was a visible share of a
    SendMessage.
    """
    now = time.time()
    second = int(now)
    cache = _second_cache
    if cache[0] != second:
        cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        cache[0] = second
    return f"{cache[1]}.{int((now - second) * 1000):03d}Z"


class TraceSubscription:
    """One live reader of the bus: an async iterator of records that ends on close()."""

    def __init__(self, bus: TraceBus, backlog: list[TraceRecord]) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[TraceRecord | None] = asyncio.Queue()
        for record in backlog:
            self._queue.put_nowait(record)
        self._closed = False

    def _push(self, record: TraceRecord | None) -> None:
        if not self._closed:
            self._queue.put_nowait(record)

    def close(self) -> None:
        """End the iteration (idempotent); the bus forgets this subscription."""
        if not self._closed:
            self._queue.put_nowait(None)
            self._closed = True
            self._bus._forget(self)

    def __aiter__(self) -> AsyncIterator[TraceRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[TraceRecord]:
        while True:
            record = await self._queue.get()
            if record is None:
                return
            yield record


class TraceBus:
    def __init__(self, backlog: int = 1000) -> None:
        self._sinks: list[TraceSink] = []
        self._subscriptions: list[TraceSubscription] = []
        self._backlog: deque[TraceRecord] = deque(maxlen=backlog)
        self._closed = False

    def add_sink(self, sink: TraceSink) -> None:
        """Call ``sink(record)`` for every record emitted from now on."""
        self._sinks.append(sink)

    def emit(self, event: str, **fields: Any) -> TraceRecord:
        """Record ``event`` with ``fields``; returns the record as sinks saw it."""
        record: TraceRecord = {"ts": utc_timestamp(), "event": event}
        for key, value in fields.items():
            # Belt and braces: the door never passes a token to emit(), and a string
            # that holds one (a formation token, an Authorization value) is still
            # never written.
            record[key] = redact(value) if isinstance(value, str) else value
        self._backlog.append(record)
        for sink in self._sinks:
            try:
                sink(record)
            except Exception:  # a broken sink must not break the door or the other sinks
                log.exception("trace sink %r failed on a %s record", sink, event)
        for subscription in self._subscriptions:
            subscription._push(record)
        return record

    def subscribe(self, *, replay: bool = True) -> TraceSubscription:
        """A live subscription; with ``replay`` it first yields the kept backlog."""
        subscription = TraceSubscription(self, list(self._backlog) if replay else [])
        if self._closed:
            subscription.close()
        else:
            self._subscriptions.append(subscription)
        return subscription

    def close(self) -> None:
        """End every subscription (the session is ending); sinks stay attached."""
        self._closed = True
        for subscription in list(self._subscriptions):
            subscription.close()

    def _forget(self, subscription: TraceSubscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
