"""What a formation token reaches (the reference's table: exactly five scopes, any other
method ``403 insufficient_scope``), decided once in gateway/caller.py and applied by
DoorAuth's check 5 on every binding.

In order: every method the door serves, on JSON-RPC, HTTP+JSON and gRPC, is one DoorAuth
knows, and a formation token reaches five of them plus the agent card (through
``DoorAuth.decide``, the gRPC interceptor's step); what it reaches is one closed list, so
a method added later is refused to it unless it is listed; the same refusals over
JSON-RPC and HTTP+JSON against the real middleware, ``GetExtendedAgentCard`` and ``GET
/extendedAgentCard`` included; and the operator and a declared credential still read the
extended card."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx

from gateway.a2a.rest_routes import match_rest
from gateway.auth.credentials import member_credential
from gateway.auth.refusals import Refused
from gateway.caller import FORMATION_SCOPES, KNOWN_METHODS, PUSH_METHODS
from gateway.door.local_methods import LocalMethods
from gateway.door.tasks import GateConfig, TaskRun, TaskStore
from gateway.grpc.messages import METHODS as GRPC_METHODS
from gateway.routes import classify
from gateway.trace.bus import TraceBus
from tests.support.auth import asgi_scope, bearer_1_0, make_door, mint, rpc

#: The HTTP requests that name a method (each binding's paths), with that method.
HTTP_REQUESTS = [
    ("POST", "/message:send", "SendMessage"), ("POST", "/message:stream", "SendStreamingMessage"),
    ("GET", "/tasks/t-1", "GetTask"), ("GET", "/tasks", "ListTasks"),
    ("POST", "/tasks/t-1:cancel", "CancelTask"), ("GET", "/tasks/t-1:subscribe",
                                                 "SubscribeToTask"),
    ("POST", "/tasks/t-1/pushNotificationConfigs", "CreateTaskPushNotificationConfig"),
    ("GET", "/tasks/t-1/pushNotificationConfigs", "ListTaskPushNotificationConfigs"),
    ("GET", "/tasks/t-1/pushNotificationConfigs/c-1", "GetTaskPushNotificationConfig"),
    ("DELETE", "/tasks/t-1/pushNotificationConfigs/c-1", "DeleteTaskPushNotificationConfig"),
    ("GET", "/extendedAgentCard", "GetExtendedAgentCard"),
    ("GET", "/acme/extendedAgentCard", "GetExtendedAgentCard"),
    ("GET", "/.well-known/agent-card.json", "AgentCard"),
    ("GET", "/resources/files/out.txt", "resources/files"),
    ("GET", "/metrics", "Metrics"),
]
#: What a formation token reaches, written out (the reference's five, and the card).
REACHED = {"SendMessage", "GetTask", "CancelTask", "ListTasks", "SubscribeToTask", "AgentCard"}


async def _answer(run: TaskRun) -> str:
    return "ok"


def served_methods() -> set[str]:
    """Every method a door serves: the one table every binding dispatches through (with
    the push configuration methods a door with webhooks adds), the gRPC service's
    methods, and the methods the HTTP paths name."""
    push = SimpleNamespace(create=None, get=None, list=None, delete=None)
    table = LocalMethods(TaskStore(_answer, GateConfig(), TraceBus()), TraceBus(),
                         stop=lambda reason: None, push=push)  # type: ignore[arg-type]
    names = set(table._unary) | set(table._streaming)
    names |= set(GRPC_METHODS)
    for verb, path, method in HTTP_REQUESTS:
        route = classify(asgi_scope([], path=path, method=verb))
        assert route.method == method, (verb, path, route)
        names.add(method)
        match = match_rest(verb, path)
        assert match is None or match.route is None or match.route.method == method
    return names


def decided(token: str, method: str) -> str:
    """DoorAuth's decision for ``method`` with ``token``, as the gRPC interceptor asks it:
    ``"served"`` or the refusal's code."""
    door = make_door()
    try:
        door.app.decide([(b"authorization", f"Bearer {token}".encode())], method)
    except Refused as refused:
        return refused.code
    return "served"


def test_a_formation_token_reaches_five_of_the_doors_methods_and_the_card() -> None:
    served = served_methods()
    assert served <= KNOWN_METHODS, "a method the door serves that DoorAuth does not know"
    assert set(GRPC_METHODS) >= FORMATION_SCOPES | {"GetExtendedAgentCard"} | PUSH_METHODS
    token = mint()
    decisions = {method: decided(token, method) for method in sorted(served)}
    assert {m for m, verdict in decisions.items() if verdict == "served"} == REACHED
    assert {m for m, verdict in decisions.items() if verdict != "served"} == served - REACHED
    assert set(decisions.values()) == {"served", "insufficient_scope"}


def test_what_a_formation_token_reaches_is_one_closed_list() -> None:
    # Imported here: the list is what this test is about (gateway/caller.py decides).
    from gateway.caller import FORMATION_REACH, Credential, reach_of

    # The set every binding's scope check looks a method up in, whatever scopes a member
    # credential is given: not built from the door's methods, so a method the door
    # serves later is refused to a formation token until it is named there.
    assert member_credential("planner").reach == FORMATION_REACH == REACHED
    assert reach_of("member", KNOWN_METHODS | {"LaterMethod"}) == FORMATION_REACH
    assert Credential(kind="member", name="member:x", scopes=KNOWN_METHODS,
                      member="x").reach == FORMATION_REACH
    assert "LaterMethod" not in FORMATION_REACH
    assert decided(mint(), "LaterMethod") == "insufficient_scope"
    # A declared credential reaches its scopes and both cards; the operator every
    # method the door knows.
    assert reach_of("bearer", frozenset({"SendMessage"})) == {
        "SendMessage", "AgentCard", "GetExtendedAgentCard"}
    assert reach_of("operator", frozenset()) == KNOWN_METHODS


async def test_a_formation_token_is_refused_every_other_method_on_json_rpc_and_http() -> None:
    door = make_door()
    token = mint()
    outcomes: dict[str, tuple[int, str]] = {}
    for method in sorted(KNOWN_METHODS | {"FutureMethod", "getTask"}):
        response = await door.post(rpc(method), bearer_1_0(token))
        outcomes[f"rpc {method}"] = _outcome(response)
    for verb, path, _method in HTTP_REQUESTS:
        async with door.client() as client:
            response = await client.request(verb, path, headers=bearer_1_0(token))
        outcomes[f"{verb} {path}"] = _outcome(response)
    served = {name for name, (status, _) in outcomes.items() if status == 200}
    # "AgentCard" over JSON-RPC passes DoorAuth for any credential (the card's name), and
    # the door answers it -32601: JSON-RPC has no such method.
    assert served == {f"rpc {m}" for m in REACHED} | {
        "POST /message:send", "GET /tasks/t-1", "GET /tasks", "POST /tasks/t-1:cancel",
        "GET /tasks/t-1:subscribe", "GET /.well-known/agent-card.json"}
    for name, outcome in outcomes.items():
        if name not in served:
            assert outcome[0] == 403, (name, outcome)
            assert outcome[1].startswith("insufficient_scope: The credential member:planner "
                                         "may not call "), (name, outcome)
    assert outcomes["rpc GetExtendedAgentCard"] == outcomes["GET /extendedAgentCard"] == (
        403, "insufficient_scope: The credential member:planner may not call "
             "GetExtendedAgentCard.")
    assert outcomes["rpc FutureMethod"][1].endswith("may not call this method."), \
        "a name no method has is refused, never echoed"


async def test_the_operator_and_a_declared_credential_still_read_the_extended_card() -> None:
    door = make_door()
    tokens = {"operator": door.operator.value, "ci": "ci-token-0123456789abcdef-0123456789"}
    for who, token in tokens.items():
        rpc_answer = await door.post(rpc("GetExtendedAgentCard"), bearer_1_0(token))
        async with door.client() as client:
            rest = await client.get("/extendedAgentCard", headers=bearer_1_0(token))
        assert rpc_answer.status_code == rest.status_code == 200, who
    # ... while a formation token is refused it.
    assert (await door.post(rpc("GetExtendedAgentCard"), bearer_1_0(mint()))).status_code == 403


def _outcome(response: httpx.Response) -> tuple[int, str]:
    if response.status_code == 200:
        return 200, ""
    body: dict[str, Any] = response.json()
    return response.status_code, f"{body['error']}: {body['message']}"
