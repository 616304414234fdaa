"""gateway.relay.fanout: one upstream stream shared by every subscriber of a task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.relay.fanout import Fanout


class Upstream:
    """An upstream stream the test feeds; it knows whether it was closed."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = asyncio.Event()

    async def events(self) -> AsyncIterator[Any]:
        try:
            while (item := await self.queue.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self.closed.set()


def fanout_of(upstream: Upstream, seen: list[Any], closed: list[Fanout],
              backlog: int = 256) -> Fanout:
    return Fanout(upstream.events(), on_event=seen.append, on_close=closed.append,
                  backlog=backlog)


async def take(events: AsyncIterator[Any], count: int) -> list[Any]:
    return [await asyncio.wait_for(anext(events), 2) for _ in range(count)]


async def test_every_subscriber_gets_each_event_once_observed_once() -> None:
    upstream, seen, closed = Upstream(), [], []
    fanout = fanout_of(upstream, seen, closed)
    first = fanout.join()

    async def now() -> str:
        return "task-now"

    await upstream.queue.put("task")
    assert await take(first, 1) == ["task"]
    second = fanout.join(first=now)
    await upstream.queue.put("update")
    assert await take(first, 1) == ["update"]
    assert await take(second, 2) == ["task-now", "update"]
    assert seen == ["task", "update"]  # the door observes each event once
    await upstream.queue.put(None)  # the upstream stream ends: every subscriber's ends
    for events in (first, second):
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(events), 2)
    assert closed == [fanout] and fanout.closed


async def test_the_last_subscriber_leaving_closes_the_upstream_stream() -> None:
    upstream, seen, closed = Upstream(), [], []
    fanout = fanout_of(upstream, seen, closed)
    first, second = fanout.join(), fanout.join()
    await upstream.queue.put("task")
    await take(first, 1)
    await first.aclose()  # type: ignore[attr-defined]
    assert not upstream.closed.is_set()
    await second.aclose()  # never read, closed all the same
    await asyncio.wait_for(upstream.closed.wait(), 2)
    assert closed == [fanout] and len(fanout) == 0


async def test_a_subscriber_too_far_behind_is_dropped_and_the_others_go_on() -> None:
    upstream, seen, closed = Upstream(), [], []
    fanout = fanout_of(upstream, seen, closed, backlog=3)
    slow, quick = fanout.join(), fanout.join()
    for n in range(5):
        await upstream.queue.put(n)
        assert await take(quick, 1) == [n]
    assert await take(slow, 3) == [0, 1, 2]
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(slow), 2)
    assert len(fanout) == 1 and not fanout.closed


async def test_an_upstream_failure_reaches_every_subscriber() -> None:
    upstream, seen, closed = Upstream(), [], []
    fanout = fanout_of(upstream, seen, closed)
    first, second = fanout.join(), fanout.join()
    await upstream.queue.put(RuntimeError("member 'coder' did not answer"))
    for events in (first, second):
        with pytest.raises(RuntimeError, match="did not answer"):
            await asyncio.wait_for(anext(events), 2)
    assert fanout.closed
