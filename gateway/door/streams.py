"""How many live streams a door holds, and for whom (docs/limits.md, "Streams").

A stream (``SendStreamingMessage``, ``SubscribeToTask``, ``murmur.WatchSession``, on
either binding) holds a connection for as long as its task runs. Bounded only by the
door's connection cap, one credential could open streams until no connection is left
for anyone, the operator's included. So every stream takes a :class:`StreamTicket` from
the door's :class:`StreamBook` before anything else is done for it, in this order:

1. at most ``per_owner`` live streams per owner (a credential's owner: its name, or a
   JWT's subject), else the refusal: ``-32050`` with ``retryAfterMs`` (``429`` with
   ``Retry-After`` on HTTP+JSON);
2. at most ``per_task`` live streams on one task, else the same refusal;
3. at most ``total`` live streams at the door (its connection cap less a headroom kept
   for new requests): at the bound, the oldest stream of the owner holding the most
   streams is ended to make room, so a newcomer is never refused for what others hold.

A ticket is given back when its stream ends, however it ends. A ticket whose stream was
ended for room has its ``evicted`` event set; the stream's writer ends it cleanly (the
client sees the stream close, and may subscribe again).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from gateway.a2a.jsonrpc import RpcError

#: The defaults (docs/limits.md); a member runtime sets ``total`` from its connection cap.
PER_OWNER = 32
PER_TASK = 16
TOTAL = 448
#: How long a refused caller is asked to wait: streams are long, so not a moment.
RETRY_AFTER_MS = 1000


def too_many_streams(detail: str) -> RpcError:
    """The refusal of a stream past a bound: ``-32050``, ``429`` on HTTP+JSON."""
    return RpcError("TOO_MANY_STREAMS", detail,
                    metadata={"retryAfterMs": str(RETRY_AFTER_MS)},
                    extra=({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": f"{RETRY_AFTER_MS / 1000:.3f}s"},))


@dataclass(frozen=True)
class StreamLimits:
    """The bounds of :class:`StreamBook`, as a door's settings carry them."""

    per_owner: int = PER_OWNER
    per_task: int = PER_TASK
    total: int = TOTAL

    def book(self) -> StreamBook:
        return StreamBook(per_owner=self.per_owner, per_task=self.per_task,
                          total=self.total)


@dataclass(eq=False)
class StreamTicket:
    """One live stream's place in the book."""

    owner: str
    task_id: str | None
    order: int
    book: StreamBook | None
    evicted: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """The stream ended: its place is free (twice is once)."""
        book, self.book = self.book, None
        if book is not None:
            book._release(self)


class StreamBook:
    """The live streams of one door, by owner and by task."""

    def __init__(self, *, per_owner: int = PER_OWNER, per_task: int = PER_TASK,
                 total: int = TOTAL) -> None:
        for name, value in (("per_owner", per_owner), ("per_task", per_task),
                            ("total", total)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.per_owner = per_owner
        self.per_task = per_task
        self.total = total
        self._by_owner: dict[str, dict[StreamTicket, None]] = {}
        self._by_task: dict[str, int] = {}
        self._count = 0
        self._order = itertools.count()

    def __len__(self) -> int:
        return self._count

    def admit(self, owner: str, task_id: str | None = None) -> StreamTicket:
        """A ticket for a new stream, or :func:`too_many_streams` (steps 1-3)."""
        held = self._by_owner.get(owner)
        if held is not None and len(held) >= self.per_owner:
            raise too_many_streams(f"this credential holds {len(held)} live streams, "
                                   f"the most a door serves one credential; end one first")
        if task_id is not None and self._by_task.get(task_id, 0) >= self.per_task:
            raise too_many_streams(f"the task is followed by {self.per_task} live streams "
                                   "already, the most a door serves one task")
        if self._count >= self.total:
            self._evict_one()
        ticket = StreamTicket(owner, task_id, next(self._order), self)
        self._by_owner.setdefault(owner, {})[ticket] = None
        self._count += 1
        if task_id is not None:
            self._by_task[task_id] = self._by_task.get(task_id, 0) + 1
        return ticket

    def holders(self) -> Iterator[tuple[str, int]]:
        """(owner, live streams) of every owner holding one."""
        return ((owner, len(held)) for owner, held in self._by_owner.items())

    def _evict_one(self) -> None:
        # The owner holding the most; its oldest stream (dicts keep insertion order).
        owner = max(self._by_owner, key=lambda name: len(self._by_owner[name]))
        oldest = next(iter(self._by_owner[owner]))
        oldest.evicted.set()
        oldest.release()

    def _release(self, ticket: StreamTicket) -> None:
        held = self._by_owner.get(ticket.owner)
        if held is not None:
            held.pop(ticket, None)
            if not held:
                del self._by_owner[ticket.owner]
        self._count -= 1
        if ticket.task_id is not None:
            left = self._by_task.get(ticket.task_id, 0) - 1
            if left > 0:
                self._by_task[ticket.task_id] = left
            else:
                self._by_task.pop(ticket.task_id, None)
