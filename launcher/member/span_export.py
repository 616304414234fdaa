"""OTLP export of a member's spans (the ``otel`` extra; docs/tracing.md).

A member exports only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set in its environment, and the ``otel`` extra
(the OpenTelemetry SDK and its OTLP/HTTP exporter) is installed; set without the extra,
the member says so once in its log and runs on. In this order:

1. :func:`start_span_export` builds the exporter (which reads the standard
   ``OTEL_EXPORTER_OTLP_*`` variables: endpoint, headers, timeout) behind a batching
   processor, and returns :class:`SpanExport`, a trace sink;
2. the sink turns the member's own trace records into spans, with the ids the records
   carry (gateway.trace.context), so the spans of every member join one trace:
   ``a2a_task_received`` opens a task span (kind SERVER; its parent is the caller's call
   span), the task's terminal ``task_state`` ends and exports it; each ``member_call``
   is a call span (kind CLIENT, a child of the calling task's span) marking the moment
   the call was placed;
3. :meth:`SpanExport.close` at the session's end exports the task spans still open (as
   ended by the session) and flushes, bounded by the exporter's timeout.

Nothing a span holds is a token: the records it is made of never hold one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from gateway.protocol import TERMINAL_STATES

__all__ = ["ENDPOINT_VARIABLES", "SpanExport", "start_span_export"]

log = logging.getLogger("murmur.member")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
#: States that mark a task span as an error.
_ERROR_STATES = frozenset({"TASK_STATE_FAILED", "TASK_STATE_REJECTED"})
#: How long the session's end waits for the last spans to leave (milliseconds).
_FLUSH_MILLIS = 3000

Record = Mapping[str, Any]


def start_span_export(*, member: str, session_id: str, formation_id: str | None,
                      environ: Mapping[str, str] = os.environ) -> SpanExport | None:
    """The member's span exporter, or ``None`` when export is not asked for (or the
    extra is missing, which the log then says)."""
    if not any(environ.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
                    "installed: no spans are exported (pip install 'murmur-door[otel]')")
        return None
    attributes = {"service.name": member, "murmur.member": member,
                  "murmur.session_id": session_id}
    if formation_id:
        attributes["murmur.formation_id"] = formation_id
    processor = BatchSpanProcessor(OTLPSpanExporter(), export_timeout_millis=_FLUSH_MILLIS)
    return SpanExport(processor, Resource.create(attributes), member)


class SpanExport:
    """A trace sink that exports the member's tasks and calls as spans."""

    def __init__(self, processor: Any, resource: Any, member: str) -> None:
        self._processor = processor
        self._resource = resource
        self._member = member
        #: Task id -> (its received record, its start in ns).
        self._open: dict[str, tuple[Record, int]] = {}

    def __call__(self, record: Record) -> None:
        event = record.get("event")
        if event == "a2a_task_received":
            task_id = record.get("task_id")
            if isinstance(task_id, str) and record.get("span_id"):
                self._open[task_id] = (record, time.time_ns())
        elif event == "task_state":
            state = record.get("state")
            if state in TERMINAL_STATES:
                opened = self._open.pop(str(record.get("task_id")), None)
                if opened is not None:
                    self._export_task(*opened, str(state), time.time_ns())
        elif event == "member_call" and record.get("span_id"):
            self._export_call(record, time.time_ns())

    def close(self) -> None:
        """Export the task spans still open, then flush and stop (bounded)."""
        now = time.time_ns()
        for received, start in self._open.values():
            self._export_task(received, start, "session ended", now)
        self._open.clear()
        self._processor.force_flush(_FLUSH_MILLIS)
        self._processor.shutdown()

    # ------------------------------------------------------------------ the spans

    def _export_task(self, received: Record, start: int, state: str, end: int) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        attributes = {"murmur.member": self._member, "a2a.task_id": received.get("task_id"),
                      "murmur.caller": received.get("formation_member")
                      or received.get("credential"), "murmur.trust": received.get("trust"),
                      "a2a.task.state": state}
        status = Status(StatusCode.ERROR, state) if state in _ERROR_STATES else Status(
            StatusCode.UNSET)
        self._end(f"task {self._member}", received, SpanKind.SERVER, attributes, status,
                  start, end)

    def _export_call(self, record: Record, at: int) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        outcome = record.get("outcome")
        attributes = {"murmur.member": self._member, "murmur.callee": record.get("callee"),
                      "a2a.task_id": record.get("task_id"), "url.full": record.get("url"),
                      "murmur.callee_task_id": record.get("callee_task_id"),
                      "murmur.call.outcome": outcome, "murmur.call.via": record.get("via")}
        status = Status(StatusCode.ERROR, str(outcome)) if outcome else Status(
            StatusCode.UNSET)
        self._end(f"call {record.get('callee')}", record, SpanKind.CLIENT, attributes, status,
                  at, at)

    def _end(self, name: str, record: Record, kind: Any, attributes: dict[str, Any],
             status: Any, start: int, end: int) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, TraceFlags

        try:
            trace_id = int(str(record["trace_id"]), 16)
            context = SpanContext(trace_id, int(str(record["span_id"]), 16), is_remote=False,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED))
            parent_id = record.get("parent_span_id")
            parent = None if not parent_id else SpanContext(
                trace_id, int(str(parent_id), 16), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED))
        except (KeyError, ValueError):
            return                          # a record without valid ids makes no span
        span = ReadableSpan(name, context=context, parent=parent, resource=self._resource,
                            attributes={key: value for key, value in attributes.items()
                                        if value is not None},
                            kind=kind, status=status, start_time=start, end_time=end)
        self._processor.on_end(span)
