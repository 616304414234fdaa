"""ListTasks, the same for a local door and a relay: the tasks a caller may see,
filtered, newest status first, paged with cursors the door issued.

In this order: :func:`page_of` (filter by context, state and status time; sort by
status time then id, newest first; start after the cursor; cut the page), then the
cursors (:func:`encode_cursor`, :func:`decode_cursor`) and the time filter's reading
(:func:`parse_status_time`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import ListTasksRequest

__all__ = ["DEFAULT_PAGE_SIZE", "Page", "decode_cursor", "encode_cursor", "page_of",
           "parse_status_time"]

DEFAULT_PAGE_SIZE = 50


class Listed(Protocol):
    """What a listed task shows of itself (a local TaskRecord, a relay's KnownTask)."""

    @property
    def id(self) -> str: ...
    @property
    def context_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def updated_ns(self) -> int: ...


T = TypeVar("T", bound=Listed)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page: its ``tasks``, the token of the next page (``""``: none), its size and
    how many tasks matched in all."""

    tasks: list[T]
    next_token: str
    page_size: int
    total: int


def page_of(visible: Iterable[T], request: ListTasksRequest) -> Page[T]:
    """The page ``request`` asks for, of the tasks the caller may see (``visible``)."""
    after_ns = parse_status_time(request.status_timestamp_after)
    chosen = [task for task in visible
              if (not request.context_id or task.context_id == request.context_id)
              and (request.status is None or task.state == request.status)
              and (after_ns is None or task.updated_ns >= after_ns)]
    chosen.sort(key=lambda task: (task.updated_ns, task.id), reverse=True)
    page_size = request.page_size or DEFAULT_PAGE_SIZE
    start = 0
    if request.page_token:
        cursor = decode_cursor(request.page_token)
        while start < len(chosen) and (chosen[start].updated_ns, chosen[start].id) >= cursor:
            start += 1
    page = chosen[start:start + page_size]
    more = start + page_size < len(chosen)
    next_token = encode_cursor(page[-1].updated_ns, page[-1].id) if more and page else ""
    return Page(page, next_token, page_size, len(chosen))


def encode_cursor(updated_ns: int, task_id: str) -> str:
    raw = f"{updated_ns}:{task_id}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
        stamp, task_id = raw.split(":", 1)
        return int(stamp), task_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise RpcError("INVALID_PARAMS",
                       "pageToken: not a token this door issued; "
                       "pass the nextPageToken of the previous page") from exc


def parse_status_time(value: str | None) -> int | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise RpcError("INVALID_PARAMS",
                       "statusTimestampAfter: use an ISO 8601 time such as "
                       "2026-01-02T03:04:05Z") from exc
    if moment.tzinfo is None:
        raise RpcError("INVALID_PARAMS", "statusTimestampAfter: give the time in UTC (Z)")
    return int(moment.timestamp() * 1_000_000_000)
