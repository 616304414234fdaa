"""W3C trace context (``traceparent``) across a formation's members.

One trace follows a piece of work from member to member (docs/tracing.md):

1. a door reads the ``traceparent`` of a request that starts a task (the bindings set
   :data:`INCOMING_TRACEPARENT` while the request's handler runs; a malformed value is
   ignored, as the W3C recommendation says, and a new trace starts);
2. the task gets a span of its own: :func:`task_span`, a child of the caller's span, or
   the root of a new trace; ``a2a_task_received`` records its three ids;
3. every call the task's agent makes to a member gets a span of its own too,
   :func:`call_span`, a child of the task's span; the proxy sends it as the call's
   ``traceparent`` (:func:`traceparent`), so the callee's task span is its child.

The ids are lowercase hex, 32 digits for a trace and 16 for a span, never all zeros.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gateway.types import Scope

__all__ = ["INCOMING_TRACEPARENT", "TASK_STARTING_METHODS", "TRACEPARENT_HEADER", "Span",
           "TaskSpans", "call_span", "incoming_traceparent", "parse_traceparent",
           "task_span", "traceparent"]

TRACEPARENT_HEADER: Final = b"traceparent"

#: The methods that may start a task: only their requests' ``traceparent`` is read, so a
#: GetTask (the polling hot path) pays one set lookup for tracing.
TASK_STARTING_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage"})

#: The ``traceparent`` of the request being handled, set by a binding around its handler
#: (``None``: the request had none).
INCOMING_TRACEPARENT: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "murmur_incoming_traceparent", default=None)

# version - trace-id - parent-id - flags. Version ff is invalid; a later version may add
# fields after the flags, which this reader ignores (the recommendation's rule).
_TRACEPARENT: Final = re.compile(
    rb"(?!ff)([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\Z")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


@dataclass(frozen=True, slots=True)
class Span:
    """One span: a task a door holds, or one call a task makes."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None

    def fields(self) -> dict[str, str | None]:
        """The span as trace-record fields."""
        return {"trace_id": self.trace_id, "span_id": self.span_id,
                "parent_span_id": self.parent_span_id}


#: The span of a task by its id, or ``None`` for a task unknown here.
TaskSpans = Callable[[str], Span | None]


def parse_traceparent(value: bytes | None) -> tuple[str, str] | None:
    """``(trace_id, parent_span_id)`` of a valid ``traceparent``, else ``None``."""
    if not value or len(value) > 512:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version, trace_id, span_id = (part.decode("ascii") for part in match.group(1, 2, 3))
    if (version == "00" and match.group(5)) or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id


def incoming_traceparent(scope: Scope) -> bytes | None:
    """The request's ``traceparent`` header; ``None`` when absent or given twice (the
    recommendation: more than one is no trace context)."""
    found: bytes | None = None
    for name, value in scope.get("headers", ()):
        if name == TRACEPARENT_HEADER:
            if found is not None:
                return None
            found = value
    return found


def _new_span_id() -> str:
    return os.urandom(8).hex()


def task_span(incoming: bytes | None) -> Span:
    """The span of a task started by a request carrying ``incoming`` (or none)."""
    parent = parse_traceparent(incoming)
    if parent is None:
        return Span(os.urandom(16).hex(), _new_span_id())
    return Span(parent[0], _new_span_id(), parent[1])


def call_span(task: Span | None) -> Span:
    """The span of one call a task makes: a child of the task's span (a new trace when
    the calling task is unknown, e.g. a request made outside any task)."""
    if task is None:
        return Span(os.urandom(16).hex(), _new_span_id())
    return Span(task.trace_id, _new_span_id(), task.span_id)


def traceparent(span: Span) -> bytes:
    """The ``traceparent`` header value that makes the receiver's span a child of
    ``span`` (sampled)."""
    return f"00-{span.trace_id}-{span.span_id}-01".encode("ascii")
