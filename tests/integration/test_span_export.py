"""OTLP export (the ``otel`` extra; docs/tracing.md) from a real formation to an
in-process collector stand-in on loopback: every member's spans arrive, in one trace,
each callee's task span a child of its caller's call span, that a child of the calling
task's span."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the otel extra is not installed (pip install -e '.[otel]'); make test installs it")


class _Collector(BaseHTTPRequestHandler):
    """OTLP/HTTP's trace endpoint: each request body kept, answered as a collector does."""

    bodies: list[bytes]

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        answer = trace_service.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    handler = type("Collector", (_Collector,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.bodies
    finally:
        server.shutdown()
        server.server_close()


def _spans(bodies: list[bytes]) -> list[dict[str, Any]]:
    spans = []
    for body in bodies:
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next(a.value.string_value for a in resource_spans.resource.attributes
                           if a.key == "service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append({"service": service, "name": span.name,
                                  "trace_id": span.trace_id.hex(),
                                  "span_id": span.span_id.hex(),
                                  "parent": span.parent_span_id.hex() or None,
                                  "kind": span.kind,
                                  "start": span.start_time_unix_nano,
                                  "end": span.end_time_unix_nano})
    return spans


def test_every_members_spans_reach_the_collector_linked_across_members(
        tmp_path: Path, murmur_home: Path, collector: tuple[str, list[bytes]]) -> None:
    endpoint, bodies = collector
    project = simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                             reachability={"planner": ["coder", "reviewer"]},
                             agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT,
                                     "reviewer": REVIEWER_AGENT})
    env = launcher_env(MURMUR_HOME=str(murmur_home), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    process = start_launcher(project, "--json", "--task", "ship it", env=env)
    read_formation_line(process, timeout=90)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()

    spans = _spans(bodies)
    tasks = {s["service"]: s for s in spans if s["name"].startswith("task ")}
    calls = {s["name"]: s for s in spans if s["name"].startswith("call ")}
    assert set(tasks) == {"planner", "coder", "reviewer"}
    assert set(calls) == {"call coder", "call reviewer"}
    assert len({s["trace_id"] for s in spans}) == 1
    assert tasks["planner"]["parent"] is None
    for callee in ("coder", "reviewer"):
        call = calls[f"call {callee}"]
        assert call["service"] == "planner" and call["parent"] == tasks["planner"]["span_id"]
        assert tasks[callee]["parent"] == call["span_id"]
    assert all(s["end"] >= s["start"] > 0 for s in spans)
