"""gateway.trace.bus: records, sinks, the backlog and live subscriptions."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from gateway.trace.bus import TraceBus


def test_a_record_has_ts_and_event_then_the_fields() -> None:
    bus = TraceBus()
    record = bus.emit("task_state", task_id="t1", state="TASK_STATE_WORKING")
    assert list(record) == ["ts", "event", "task_id", "state"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
    assert record["event"] == "task_state"


def test_a_value_that_looks_like_a_token_is_never_written() -> None:
    bus = TraceBus()
    seen: list[dict[str, Any]] = []
    bus.add_sink(seen.append)
    bus.emit("member_call", callee="coder", token="mft1.eyJhIjoiYiJ9.c2ln",
             header="Bearer abc", url="http://coder.formation.invalid")
    assert seen[0]["token"] == "[redacted]" and seen[0]["header"] == "[redacted]"
    assert seen[0]["url"] == "http://coder.formation.invalid"


def test_a_failing_sink_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    bus = TraceBus()
    seen: list[str] = []

    def broken(record: dict[str, Any]) -> None:
        raise OSError("disk full")

    bus.add_sink(broken)
    bus.add_sink(lambda record: seen.append(record["event"]))
    bus.emit("session_start")
    bus.emit("session_end")
    assert seen == ["session_start", "session_end"]
    assert "trace sink" in caplog.text


async def test_a_subscription_replays_the_backlog_then_follows() -> None:
    bus = TraceBus(backlog=2)
    for name in ("one", "two", "three"):
        bus.emit(name)
    subscription = bus.subscribe()
    got: list[str] = []

    async def read() -> None:
        async for record in subscription:
            got.append(record["event"])

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    bus.emit("four")
    await asyncio.sleep(0)
    bus.close()
    await asyncio.wait_for(reader, 2)
    assert got == ["two", "three", "four"], "only the last `backlog` records are replayed"
    late = bus.subscribe(replay=False)
    assert [record async for record in late] == [], "a closed bus ends subscriptions at once"


async def test_closing_a_subscription_forgets_it() -> None:
    bus = TraceBus()
    subscription = bus.subscribe(replay=False)
    subscription.close()
    bus.emit("after")
    assert [record async for record in subscription] == []
