"""Bounds along the edges at a member's door (roster version 2, docs/bounds.md).

A door whose formation bounds its calls gives DoorAuth an :class:`EdgeGuard`: after
checks 1-8 admitted a request, a task-starting call (``SendMessage``,
``SendStreamingMessage``, on either binding) from a member, named by its formation
token's ``from``, meets two more checks (:meth:`EdgeGuard.admit`), in this order:

9. ``403 depth_exceeded``: the call's depth (``x-murmur-call-depth``, stamped by the
   caller's runtime, whose proxies strip the header from everything an agent sends) is
   past the formation's ``limits.depth``;
10. the edge's limits: ``403 limit_reached`` once the caller's tasks here reached
   ``calls``; ``429 rate_limited`` with ``Retry-After`` while ``concurrent`` of its tasks
   are live, or sooner than ``60/per_minute`` seconds after its last call (``per_minute``
   spaces calls evenly: no burst, so no minute ever holds more than ``per_minute + 1``).

Every other request, and every call from the operator or a client (whose tasks are depth
0), passes untouched, at no cost but one test. A call that passes is an
:class:`EdgeCall`, left in :data:`EDGE_CALL` while the app handles it: the task store
tells it when the task is made (:meth:`EdgeCall.task_created`) and when it ends
(:meth:`EdgeCall.task_ended`), so ``calls`` and ``concurrent`` count tasks, not requests
(a follow-up message or a busy answer is no call). The store records the call's depth
on the task. The checks are synchronous and DoorAuth calls them in its own step: a
bounded door adds no ASGI layer.

An edge with ``approve: true`` also says how many of the door's :data:`APPROVAL_ROOM`
waiting places its caller may hold at once (``approve_queue``, default
:data:`APPROVE_QUEUE_DEFAULT`); the task store's approvals enforce it
(gateway/door/approvals.py), not the guard.

In order: the limits (:class:`EdgeLimits`, :class:`DoorBounds`, read from the channel's
wire form), one edge's counts (:class:`EdgeCounts`), :class:`EdgeCall`, the guard.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.auth.refusals import Refused
from gateway.caller import Caller
from gateway.protocol import CALL_DEPTH_HEADER, MEMBER_NAME_RE

__all__ = ["APPROVAL_ROOM", "APPROVE_QUEUE_DEFAULT", "APPROVE_QUEUE_MAX", "EDGE_CALL",
           "DoorBounds", "EdgeCall", "EdgeGuard", "EdgeLimits"]

#: Tasks that may wait for the operator at one door at once, whoever called.
APPROVAL_ROOM: Final = 64
#: How many of them one caller may hold when its edge names no ``approve_queue``: a
#: quarter of the room, so one caller never keeps another's call from waiting.
APPROVE_QUEUE_DEFAULT: Final = 16
#: The largest ``approve_queue``: one caller at it still leaves the room a default share
#: for the others.
APPROVE_QUEUE_MAX: Final = APPROVAL_ROOM - APPROVE_QUEUE_DEFAULT

#: The methods that start a task: the only ones bounded.
_BOUNDED_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage"})
_DEPTH_HEADER: Final = CALL_DEPTH_HEADER.encode("ascii")
#: A depth past this is read as this (a header is never trusted to size anything).
_MAX_DEPTH: Final = 10_000
#: What a caller waits when its live tasks are at ``concurrent``: no one knows when one
#: ends, so the call is offered again soon.
_CONCURRENT_RETRY_SECONDS: Final = 1.0
_MINUTE: Final = 60.0

#: The call being handled, for the task store (``None``: not a bounded member call).
EDGE_CALL: contextvars.ContextVar[EdgeCall | None] = contextvars.ContextVar(
    "murmur_edge_call", default=None)


# --- the limits ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """One incoming edge's bounds (``reachability[].limits``, ``approve``)."""

    calls: int | None = None
    concurrent: int | None = None
    per_minute: int | None = None
    approve: bool = False
    #: Seconds a call waits for the operator before it is rejected.
    approve_timeout: float | None = None
    #: How many of the caller's calls may wait for the operator here at once (its share
    #: of the approval room; ``None``: :data:`APPROVE_QUEUE_DEFAULT`).
    approve_queue: int | None = None

    @property
    def approval_share(self) -> int:
        """The places of the door's approval room this edge's caller may hold."""
        return self.approve_queue or APPROVE_QUEUE_DEFAULT

    def wire(self) -> dict[str, Any]:
        return {key: value for key, value in (
            ("calls", self.calls), ("concurrent", self.concurrent),
            ("per_minute", self.per_minute), ("approve", self.approve or None),
            ("approve_timeout", self.approve_timeout),
            ("approve_queue", self.approve_queue)) if value is not None}

    @classmethod
    def from_wire(cls, data: Any) -> EdgeLimits:
        if not isinstance(data, Mapping) or set(data) - {
                "calls", "concurrent", "per_minute", "approve", "approve_timeout",
                "approve_queue"}:
            raise ValueError("an edge's limits must be an object of calls, concurrent, "
                             "per_minute, approve, approve_timeout, approve_queue")
        counts = {key: _positive(data.get(key), key) for key in
                  ("calls", "concurrent", "per_minute")}
        approve = data.get("approve", False)
        timeout = data.get("approve_timeout")
        queue = _positive(data.get("approve_queue"), "approve_queue")
        if not isinstance(approve, bool):
            raise ValueError("approve must be true or false")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, int | float) or not 0 < timeout < math.inf):
            raise ValueError("approve_timeout must be a positive number of seconds")
        if queue is not None and queue > APPROVE_QUEUE_MAX:
            raise ValueError(f"approve_queue must be at most {APPROVE_QUEUE_MAX}")
        return cls(**counts, approve=approve,
                   approve_timeout=None if timeout is None else float(timeout),
                   approve_queue=queue)


@dataclass(frozen=True, slots=True)
class DoorBounds:
    """What a door bounds: the formation's ``limits.depth`` and its incoming edges'
    limits, by caller."""

    depth: int | None = None
    incoming: Mapping[str, EdgeLimits] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        if self.depth is not None:
            wire["depth"] = self.depth
        if self.incoming:
            wire["incoming"] = {name: limits.wire() for name, limits in self.incoming.items()}
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> DoorBounds:
        """The door's part of a channel's ``bounds``; ValueError names what is wrong."""
        incoming = data.get("incoming", {})
        if not isinstance(incoming, Mapping) or not all(
                isinstance(name, str) and MEMBER_NAME_RE.fullmatch(name) for name in incoming):
            raise ValueError("incoming must be an object of member names to limits")
        return cls(depth=_positive(data.get("depth"), "depth"),
                   incoming={name: EdgeLimits.from_wire(limits)
                             for name, limits in incoming.items()})

    @property
    def bounded(self) -> bool:
        """Whether the door has anything to check."""
        return self.depth is not None or bool(self.incoming)


def _positive(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1")
    return value


def _stamped_depth(headers: list[tuple[bytes, bytes]]) -> int:
    """A member's call's depth as its runtime stamped it (1 when the stamp is missing or
    unreadable: a member's call is at least one deep; anyone else's calls are depth 0 and
    never come here)."""
    for name, value in headers:
        if name == _DEPTH_HEADER:
            return min(int(value), _MAX_DEPTH) if value.isdigit() and len(value) < 8 else 1
    return 1


# --- one edge's counts --------------------------------------------------------------------

class EdgeCounts:
    """What one caller did at this door: tasks made, tasks live, calls in flight (passed
    the guard, no task yet), and when ``per_minute`` admits its next call."""

    __slots__ = ("created", "live", "next_at", "pending")

    def __init__(self) -> None:
        self.created = 0
        self.live = 0
        self.pending = 0
        self.next_at = 0.0


class EdgeCall:
    """One call the guard let through: the store reports its task's start and end."""

    __slots__ = ("_counts", "_made", "_ended", "caller", "depth", "limits")

    def __init__(self, caller: str, depth: int, limits: EdgeLimits | None,
                 counts: EdgeCounts) -> None:
        self.caller = caller
        self.depth = depth
        self.limits = limits
        self._counts = counts
        self._made = False
        self._ended = False

    def task_created(self) -> None:
        if self._made:
            return
        self._made = True
        counts = self._counts
        counts.pending -= 1
        counts.created += 1
        counts.live += 1

    def task_ended(self) -> None:
        if self._made and not self._ended:
            self._ended = True
            self._counts.live -= 1

    def released(self) -> None:
        """The request ended; a call that made no task gives its place back."""
        if not self._made:
            self._made = self._ended = True
            self._counts.pending -= 1


# --- the guard ----------------------------------------------------------------------------

#: ``on_refusal(error, caller, limit, value)``: a call refused or slowed (metrics, trace).
OnRefusal = Callable[[str, str, str, int], None]


class EdgeGuard:
    """Checks 9 and 10 (see the module text), for DoorAuth."""

    __slots__ = ("bounds", "_counts", "_on_refusal")

    def __init__(self, bounds: DoorBounds, on_refusal: OnRefusal | None = None) -> None:
        self.bounds = bounds
        self._counts: dict[str, EdgeCounts] = {}
        self._on_refusal = on_refusal

    @staticmethod
    def bounds_call(caller: Caller, method: str | None) -> bool:
        """Whether a request of ``caller`` for ``method`` meets checks 9 and 10."""
        return method in _BOUNDED_METHODS and caller.credential.kind == "member"

    def counts(self, caller: str) -> EdgeCounts:
        counts = self._counts.get(caller)
        if counts is None:
            counts = self._counts[caller] = EdgeCounts()
        return counts

    def admit(self, caller: Caller, headers: list[tuple[bytes, bytes]]) -> EdgeCall:
        """Checks 9 and 10 for a member's task-starting call: its :class:`EdgeCall`, or
        :class:`Refused` (``depth_exceeded``, ``limit_reached``, ``rate_limited``).

        Every call of a bounded edge comes here, so it is one function with the refusals
        out of line (a call that passes costs a few attribute reads)."""
        credential = caller.credential
        member = credential.member or credential.name
        depth = _stamped_depth(headers)     # bounds_call let only a member's call here
        bounds = self.bounds
        if bounds.depth is not None and depth > bounds.depth:
            self._refused("depth_exceeded", member, "depth", bounds.depth)
            raise Refused("depth_exceeded", member, depth=str(depth), limit=str(bounds.depth))
        counts = self._counts.get(member)
        if counts is None:
            counts = self._counts[member] = EdgeCounts()
        limits = bounds.incoming.get(member)
        if limits is not None:
            self._check(member, limits, counts)
        counts.pending += 1
        return EdgeCall(member, depth, limits, counts)

    def _check(self, member: str, limits: EdgeLimits, counts: EdgeCounts) -> None:
        """Check 10 for an edge with limits; spaces ``per_minute`` calls from this one."""
        calls = limits.calls
        if calls is not None:
            if counts.created >= calls:
                self._refused("limit_reached", member, "calls", calls)
                raise Refused("limit_reached", member, member=member, limit=str(calls))
            if counts.created + counts.pending >= calls:
                # Calls in flight may still fail and give their place back: not yet final.
                self._slow(member, "calls", calls, _CONCURRENT_RETRY_SECONDS)
        if limits.concurrent is not None and counts.live + counts.pending >= limits.concurrent:
            self._slow(member, "concurrent", limits.concurrent, _CONCURRENT_RETRY_SECONDS)
        if limits.per_minute is not None:
            now = time.monotonic()
            if counts.next_at > now:
                self._slow(member, "per_minute", limits.per_minute, counts.next_at - now)
            # Spaced, not bursted: the next call is admitted 60/per_minute s after this.
            counts.next_at = now + _MINUTE / limits.per_minute

    def _slow(self, member: str, limit: str, value: int, wait: float) -> None:
        self._refused("rate_limited", member, limit, value)
        raise Refused("rate_limited", member, retry_after=max(wait, 0.001), member=member,
                      name=limit, limit=str(value))

    def _refused(self, code: str, member: str, limit: str, value: int) -> None:
        if self._on_refusal is not None:
            self._on_refusal(code, member, limit, value)
