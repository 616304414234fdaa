"""gateway.sse's reading side: one reader for ``mur``, call-member and the relay."""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.sse import aevent_data, byte_events, event_data, sse_event

LINES = ["data: {\"a\":1}", "", "event: error", "data: {\"b\":2}", "", ": comment",
         "data: {\"c\":3}"]


def test_sse_payloads_are_split_on_blank_lines() -> None:
    assert list(event_data(LINES)) == ['{"a":1}', '{"b":2}', '{"c":3}']


async def test_the_async_reader_reads_the_same() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in LINES:
            yield line

    assert [data async for data in aevent_data(lines())] == ['{"a":1}', '{"b":2}',
                                                            '{"c":3}']


def test_multi_line_data_is_joined_and_one_space_after_the_colon_is_dropped() -> None:
    assert list(event_data(["data:one", "data:  two", "id: 7", "retry: 10", ""])) == [
        "one\n two"]


def test_bytes_read_the_same_and_count_what_an_event_holds_so_far() -> None:
    events = byte_events()
    assert events.line(b"data: {\"x\":") is None
    assert events.line(b"data: 1}") is None
    assert len(events) == len(b"{\"x\":") + len(b"1}")
    assert events.line(b"") == b"{\"x\":\n1}"
    assert len(events) == 0 and events.end() is None


def test_what_the_door_writes_its_readers_read_back() -> None:
    written = sse_event(b'{"text":"one\xe2\x80\xa8two"}', event="error").decode()
    assert list(event_data(written.split("\n"))) == ['{"text":"one\\u2028two"}']
