"""TraceBus: the session's trace records, handed to sinks and to live watchers.

``emit(event, **fields)`` builds one record ``{"ts": ..., "event": ..., **fields}`` and gives
it to every sink (the launcher adds the ``trace.jsonl`` writer) and to every subscription
(``murmur.WatchSession`` streams them). A sink that fails is logged and kept; a record is
never lost for the others. The bus keeps the last ``backlog`` records so a watcher that
connects late first sees what came before.

Every field is bounded on its way in, whoever passes it (fields copy what callers chose,
such as a ``contextId``): a string is redacted and cut past :data:`TRACE_STRING_LIMIT`
characters with a marker, a list or mapping whose JSON passes :data:`TRACE_VALUE_LIMIT`
characters is replaced by its JSON text, cut the same way, and any other object but a
number, a boolean or ``None`` becomes its ``str``. So no record carries more than a few
KiB per field (the fields are named by code), and every record is JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.redaction import redact, redact_value

TraceRecord = dict[str, Any]
TraceSink = Callable[[TraceRecord], None]

log = logging.getLogger("murmur.trace")

#: The longest string a trace record keeps (characters). Longer than any path a record
#: names (Linux paths are at most 4,096 bytes, and the session's folders are far
#: shorter) or any identifier the wire accepts (256): only a flood is ever cut.
TRACE_STRING_LIMIT = 4096
#: The longest JSON text of a list or mapping field (characters), the same way.
TRACE_VALUE_LIMIT = 16384
#: What replaces the end of a cut string; ``{length}`` is its length before the cut.
TRACE_CUT_MARKER = "...[cut: {length} characters in all]"
#: Redaction runs on this much more than is kept, so a token that straddles the cut is
#: still recognised (every shape of gateway/redaction.py is recognised from its first 30
#: characters or so, white space aside).
_REDACT_MARGIN = 64


def bounded_text(text: str, limit: int = TRACE_STRING_LIMIT) -> str:
    """``text`` redacted, and cut to ``limit`` characters plus the marker when longer."""
    if len(text) <= limit:
        return redact(text)
    head = redact(text[: limit + _REDACT_MARGIN])[:limit]
    return head + TRACE_CUT_MARKER.format(length=len(text))


def bounded_value(value: Any) -> Any:
    """A trace field's value, bounded (see the module text). Numbers, booleans and
    ``None`` are kept; any other object becomes its ``str``, as the trace file writes
    it, so every record is JSON that ``murmur.WatchSession`` can send."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict | list | tuple):
        try:
            value = redact_value(value)
            text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)
        except (TypeError, ValueError, RecursionError):  # keys JSON cannot name, cycles
            return f"[not written: a {type(value).__name__} JSON cannot hold]"
        return bounded_text(text, TRACE_VALUE_LIMIT) if len(text) > TRACE_VALUE_LIMIT else value
    return bounded_text(value if isinstance(value, str) else str(value))


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
            # never written. Bounded here, once, for every record: fields copy what
            # callers chose, and a record must never fill the disk.
            if isinstance(value, str) and len(value) <= TRACE_STRING_LIMIT:
                record[key] = redact(value)  # the common case, kept cheap
            else:
                record[key] = bounded_value(value)
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
