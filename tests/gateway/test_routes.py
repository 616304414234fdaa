"""gateway/routes.py: a request's route, classified once, in the documented order."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.routes import CARD, FILES, HEALTH, METRICS, REST, RPC, classify, rpc_route


def scope(method: str, path: str, *, kind: str = "http", root_path: str = "") -> dict[str, Any]:
    return {"type": kind, "method": method, "path": path, "root_path": root_path,
            "headers": []}


@pytest.mark.parametrize(("path", "kind", "method"), [
    ("/", RPC, None),
    ("//", RPC, None),
    ("/.well-known/agent-card.json", CARD, "AgentCard"),
    ("/healthz", HEALTH, None),
    ("/metrics", METRICS, "Metrics"),
    ("/resources/files", FILES, "resources/files"),
    ("/resources/files/report.txt", FILES, "resources/files"),
    ("//resources//files/report.txt", FILES, "resources/files"),
    ("/tasks/t-1", REST, "GetTask"),
    ("/acme/tasks/t-1", REST, "GetTask"),
    ("/nothing/here", REST, None),
])
def test_each_path_names_its_route_and_the_method_doorauth_checks(
        path: str, kind: str, method: str | None) -> None:
    route = classify(scope("GET", path))
    assert (route.kind, route.method) == (kind, method)


def test_a_rest_route_carries_the_match_and_its_tenant() -> None:
    route = classify(scope("POST", "/acme/tasks/t-1:cancel"))
    assert route.rest is not None
    assert (route.rest.method, route.rest.task_id, route.rest.tenant) == (
        "CancelTask", "t-1", "acme")


def test_a_verb_the_path_does_not_take_names_the_verbs_it_does() -> None:
    route = classify(scope("DELETE", "/tasks/t-1"))
    assert (route.rest, route.method, route.allowed) == (None, None, ("GET",))


def test_root_path_is_removed_before_classifying() -> None:
    assert classify(scope("GET", "/door/healthz", root_path="/door")).kind == HEALTH


def test_a_websocket_is_never_matched_as_http_json() -> None:
    route = classify(scope("", "/tasks/t-1", kind="websocket"))
    assert (route.kind, route.method, route.rest) == (REST, None, None)


def test_a_json_rpc_call_gets_the_route_of_the_method_its_body_names() -> None:
    assert rpc_route("GetTask") is rpc_route("GetTask"), "built once for a known name"
    assert (rpc_route("GetTask").kind, rpc_route("GetTask").method) == (RPC, "GetTask")
    unknown = rpc_route("tasks/get")
    assert (unknown.kind, unknown.method) == (RPC, "tasks/get")
