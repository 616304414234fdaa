"""gateway/door/listing.py: ListTasks's filters, order and cursors, one for both kinds of
door."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import ListTasksRequest
from gateway.door.listing import decode_cursor, encode_cursor, page_of, parse_status_time


@dataclass
class Listed:
    id: str
    context_id: str
    state: str
    updated_ns: int


TASKS = [Listed(f"t{n}", "ctx-a" if n % 2 else "ctx-b",
                "TASK_STATE_COMPLETED" if n < 3 else "TASK_STATE_WORKING", n * 1_000_000_000)
         for n in range(1, 6)]


def request(**fields: object) -> ListTasksRequest:
    return ListTasksRequest.model_validate(fields)


def test_newest_status_first_and_the_cursor_walks_every_task_once() -> None:
    first = page_of(TASKS, request(pageSize=2))
    assert [task.id for task in first.tasks] == ["t5", "t4"]
    assert (first.page_size, first.total) == (2, 5)
    second = page_of(TASKS, request(pageSize=2, pageToken=first.next_token))
    third = page_of(TASKS, request(pageSize=2, pageToken=second.next_token))
    assert [task.id for task in second.tasks + third.tasks] == ["t3", "t2", "t1"]
    assert third.next_token == ""


def test_context_state_and_time_filter_before_paging() -> None:
    page = page_of(TASKS, request(contextId="ctx-a", status="TASK_STATE_COMPLETED"))
    assert [task.id for task in page.tasks] == ["t1"]
    after = page_of(TASKS, request(statusTimestampAfter="1970-01-01T00:00:04Z"))
    assert [task.id for task in after.tasks] == ["t5", "t4"]
    assert after.page_size == 50, "the default page"


def test_a_cursor_round_trips_and_a_foreign_one_is_invalid_params() -> None:
    assert decode_cursor(encode_cursor(42, "t-1")) == (42, "t-1")
    with pytest.raises(RpcError) as refused:
        decode_cursor("not-ours")
    assert refused.value.code == -32602


def test_a_time_without_a_zone_is_refused_naming_the_field() -> None:
    assert parse_status_time(None) is None
    with pytest.raises(RpcError, match="statusTimestampAfter"):
        parse_status_time("2026-01-02T03:04:05")
