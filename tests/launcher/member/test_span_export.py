"""launcher.member.span_export with a recording processor: which records make spans,
and a session's end exporting the task spans still open."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.member.span_export import SpanExport, start_span_export

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class Processor:
    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.flushed = self.stopped = False

    def on_end(self, span: Any) -> None:
        self.spans.append(span)

    def force_flush(self, timeout_millis: int) -> None:
        self.flushed = True

    def shutdown(self) -> None:
        self.stopped = True


def test_no_endpoint_no_export() -> None:
    assert start_span_export(member="m", session_id="s", formation_id=None, environ={}) is None


def test_tasks_and_calls_become_linked_spans_and_the_end_flushes_the_rest() -> None:
    processor = Processor()
    export = SpanExport(processor, Resource.create({"service.name": "planner"}), "planner")
    export({"event": "a2a_task_received", "task_id": "t1", "credential": "operator",
            "trace_id": TRACE, "span_id": "a" * 16, "parent_span_id": None})
    export({"event": "member_call", "task_id": "t1", "callee": "coder",
            "trace_id": TRACE, "span_id": "b" * 16, "parent_span_id": "a" * 16,
            "outcome": "refused"})
    export({"event": "task_state", "task_id": "t1", "state": "TASK_STATE_FAILED"})
    export({"event": "a2a_task_received", "task_id": "t2", "credential": "operator",
            "trace_id": TRACE, "span_id": "c" * 16, "parent_span_id": None})
    export({"event": "a2a_task_received", "task_id": "t3", "trace_id": "not hex",
            "span_id": "zz", "parent_span_id": None})
    call, task = processor.spans
    assert (call.name, call.kind, call.parent.span_id) == ("call coder", SpanKind.CLIENT,
                                                          int("a" * 16, 16))
    assert call.status.status_code == StatusCode.ERROR
    assert (task.name, task.kind, task.parent) == ("task planner", SpanKind.SERVER, None)
    assert task.status.status_code == StatusCode.ERROR
    assert task.attributes["a2a.task.state"] == "TASK_STATE_FAILED"
    export.close()
    assert [span.attributes["a2a.task_id"] for span in processor.spans[2:]] == ["t2"]
    assert processor.spans[2].attributes["a2a.task.state"] == "session ended"
    assert processor.flushed and processor.stopped
