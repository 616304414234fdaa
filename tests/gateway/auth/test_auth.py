"""DoorAuth, driven in-process with httpx.ASGITransport in front of an app that echoes what
it received: the served paths. The shared test door and its helpers are in
tests/support/auth.py; the attacks are in tests/gateway/auth/test_auth_attacks.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.auth.credentials import DeclaredBearer
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier
from gateway.caller import (
    CALLER_SCOPE_KEY,
    FORMATION_SCOPES,
    PUBLIC_CALLER,
    RPC_SCOPE_KEY,
    TASK_METHODS,
    Caller,
)
from tests.support.auth import (
    CI_TOKEN,
    FORMATION,
    KEY,
    asgi_scope,
    bearer,
    bearer_1_0,
    call_asgi,
    corp_jwt,
    error_of,
    make_door,
    mint,
    rpc,
)

# -- served calls ------------------------------------------------------------------------


async def test_formation_call_is_served_as_the_calling_member() -> None:
    door = make_door()
    response = await door.post(rpc("SendMessage"), bearer(mint()))
    assert response.status_code == 200
    seen = response.json()
    assert seen["caller"] == {"kind": "member", "name": "member:planner", "member": "planner",
                              "origin": "peer", "trust": "untrusted", "public": False}
    assert seen["rpc"] == rpc("SendMessage")


@pytest.mark.parametrize("values,trust", [
    (["trusted"], "trusted"), (["untrusted"], "untrusted"), ([], "untrusted"),
    (["Trusted"], "untrusted"), (["trusted "], "untrusted"), (["yes"], "untrusted"),
    (["trusted", "trusted"], "untrusted"), (["untrusted", "trusted"], "untrusted"),
])
async def test_formation_trust_comes_from_the_trust_header_exactly(values: list[str],
                                                                   trust: str) -> None:
    door = make_door()
    headers = [("Authorization", f"Bearer {mint()}")] + [
        ("x-murmur-task-trust", value) for value in values]
    response = await door.post(rpc(), headers)
    assert response.json()["caller"]["trust"] == trust


async def test_operator_is_operator_and_trusted_and_may_call_every_method() -> None:
    door = make_door()
    for method in ("murmur.StopSession", "murmur.WatchSession", "SendStreamingMessage",
                   "getTask", "no.such.method"):
        response = await door.post(rpc(method), bearer(door.operator.value))
        assert response.status_code == 200, method
        seen = response.json()
        assert seen["caller"]["name"] == "operator"
        assert (seen["caller"]["origin"], seen["caller"]["trust"]) == ("operator", "trusted")
        assert seen["rpc"]["method"] == method


async def test_operator_trust_is_not_lowered_or_raised_by_headers() -> None:
    door = make_door()
    headers = {**bearer(door.operator.value), "x-murmur-task-trust": "untrusted",
               "x-murmur-task-origin": "peer"}
    assert (await door.post(rpc(), headers)).json()["caller"]["origin"] == "operator"


async def test_declared_bearer_is_a_client_and_untrusted() -> None:
    door = make_door()
    headers = {**bearer(CI_TOKEN), "x-murmur-task-trust": "trusted"}
    seen = (await door.post(rpc("SendMessage"), headers)).json()
    assert seen["caller"] == {"kind": "bearer", "name": "bearer:ci", "member": None,
                              "origin": "client", "trust": "untrusted", "public": False}


async def test_declared_jwt_is_a_client_and_untrusted() -> None:
    door = make_door()
    seen = (await door.post(rpc("GetTask"), bearer(corp_jwt()))).json()
    assert (seen["caller"]["name"], seen["caller"]["origin"]) == ("jwt:corp", "client")


async def test_declared_scopes_default_to_every_task_method() -> None:
    door = make_door(bearers=(DeclaredBearer("ci", CI_TOKEN),))
    for method in sorted(TASK_METHODS):
        assert (await door.post(rpc(method), bearer(CI_TOKEN))).status_code == 200
    # Refused whatever the version (an A2A 1.0 call here).
    response = await door.post(rpc("murmur.StopSession"), bearer_1_0(CI_TOKEN))
    assert (response.status_code, error_of(response)) == (403, "insufficient_scope")


async def test_formation_token_reaches_exactly_its_five_scopes() -> None:
    door = make_door()
    for method in sorted(FORMATION_SCOPES):
        assert (await door.post(rpc(method), bearer(mint()))).status_code == 200, method


async def test_authorization_and_origin_headers_never_reach_the_app() -> None:
    door = make_door()
    headers = [("Authorization", f"Bearer {mint()}"), ("x-murmur-task-trust", "trusted"),
               ("x-murmur-task-origin", "operator"), ("x_murmur_task_origin", "operator"),
               ("x_murmur_task_trust", "trusted"), ("x-request-id", "r-1")]
    seen = (await door.post(rpc(), headers)).json()
    names = [name for name, _ in seen["headers"]]
    assert "x-request-id" in names and "host" in names
    for gone in ("authorization", "x-murmur-task-trust", "x-murmur-task-origin",
                 "x_murmur_task_origin", "x_murmur_task_trust"):
        assert gone not in names


async def test_body_is_replayed_to_the_app_byte_for_byte() -> None:
    door = make_door()
    content = b'{"jsonrpc": "2.0",\n "id": "a", "method": "GetTask", "params": {"id": "\\u00e9"}}'
    seen = (await door.post(headers=bearer(mint()), content=content)).json()
    assert seen["body"] == content.decode()
    assert seen["rpc"] == json.loads(content)


async def test_any_all_slashes_path_is_json_rpc() -> None:
    door = make_door()
    for path in ("/", "//", "///"):
        response = await door.post(rpc("murmur.StopSession"), bearer_1_0(mint()), path=path)
        assert (response.status_code, error_of(response)) == (403, "insufficient_scope"), path


async def test_any_valid_credential_may_read_the_agent_card() -> None:
    door = make_door(bearers=(DeclaredBearer("ci", CI_TOKEN, frozenset({"GetTask"})),))
    for token in (mint(), CI_TOKEN, door.operator.value, corp_jwt()):
        response = await door.get("/.well-known/agent-card.json", bearer(token))
        assert response.status_code == 200
        assert response.json()["rpc"] is None
    assert (await door.get("/.well-known/agent-card.json")).status_code == 401


async def test_files_route_needs_the_resources_files_scope() -> None:
    door = make_door()
    for path in ("/resources/files/result.txt", "/resources/files", "/resources//files/x",
                 "/resources/files/a/../b", "/resources/files%2Fx"):
        refused = await door.get(path, bearer(mint()))
        assert (refused.status_code, error_of(refused)) == (403, "insufficient_scope"), path
        assert "resources/files" in refused.json()["message"]
        assert (await door.get(path, bearer(door.operator.value))).status_code == 200


async def test_doubled_slashes_do_not_hide_the_files_route() -> None:
    # httpx would read "//resources/..." as a host name, so this one goes in raw.
    door = make_door()
    for path in ("//resources//files/x", "/resources/files//x", "///resources/files"):
        scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                            (b"authorization", f"Bearer {mint()}".encode())],
                           path=path, method="GET")
        sent = await call_asgi(door.app, scope, [{"type": "http.request", "body": b""}])
        assert sent[0]["status"] == 403, path
        assert json.loads(sent[1]["body"])["error"] == "insufficient_scope"
    assert door.echo.calls == []


async def test_root_path_is_judged_as_the_app_routes_it() -> None:
    door = make_door()
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())],
                       path="/door/resources/files/x", method="GET")
    scope["root_path"] = "/door"
    sent = await call_asgi(door.app, scope, [{"type": "http.request", "body": b""}])
    assert sent[0]["status"] == 403


async def test_healthz_needs_no_credential_and_no_host() -> None:
    door = make_door()
    async with door.client() as client:
        response = await client.get("/healthz", headers={"Host": "10.1.2.3:8080"})
        assert response.status_code == 200
        assert response.json()["caller"] is None
        assert (await client.head("/healthz")).status_code == 200
        assert (await client.post("/healthz")).status_code == 401


async def test_other_paths_are_passed_to_the_app_after_the_credential() -> None:
    door = make_door()
    assert (await door.get("/elsewhere")).status_code == 401
    response = await door.get("/elsewhere", bearer(mint()))
    assert response.status_code == 200
    assert response.json()["caller"]["name"] == "member:planner"
    assert (await door.get("/", bearer(mint()))).status_code == 200  # GET / is not JSON-RPC


async def test_public_door_checks_nothing_but_the_host() -> None:
    door = make_door(authenticated=False)
    async with door.client() as client:
        rebinding = await client.post("/", json=rpc("murmur.StopSession"),
                                      headers={"Host": "evil.example"})
        assert (rebinding.status_code, error_of(rebinding)) == (421, "misdirected_request")
        for request in (
            client.build_request("POST", "/", content=b"[1, 2]"),
            client.build_request("POST", "/", json=rpc("murmur.StopSession")),
            client.build_request("GET", "/resources/files/x", headers=bearer("nonsense")),
        ):
            response = await client.send(request)
            assert response.status_code == 200
            seen = response.json()
            assert seen["caller"]["public"] is True
            assert seen["rpc"] is None
            assert "authorization" not in [name for name, _ in seen["headers"]]


async def test_public_door_caller_is_public_untrusted() -> None:
    door = make_door(authenticated=False)
    seen = (await door.post(rpc(), {"x-murmur-task-trust": "trusted"})).json()
    assert seen["caller"]["origin"] == "public" and seen["caller"]["trust"] == "untrusted"
    assert PUBLIC_CALLER.origin == "public"


async def test_scope_keys_set_by_anyone_else_are_replaced() -> None:
    door = make_door()
    scope = asgi_scope(headers=[(b"host", b"127.0.0.1:8000"),
                                (b"authorization", f"Bearer {mint()}".encode())],
                       path="/x", method="GET")
    scope[CALLER_SCOPE_KEY] = Caller(door.operator.credential, "operator", "trusted")
    scope[RPC_SCOPE_KEY] = rpc("murmur.StopSession")
    messages = await call_asgi(door.app, scope, [{"type": "http.request", "body": b""}])
    assert messages[0]["status"] == 200
    assert door.echo.calls[-1]["caller"]["name"] == "member:planner"
    assert door.echo.calls[-1]["rpc"] is None


# -- Host (DNS rebinding) ----------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST:8000",
                                  "[::1]:8000", "127.9.8.7:8000", "[0:0:0:0:0:0:0:1]:8000"])
async def test_loopback_host_with_the_doors_port_is_served(host: str) -> None:
    door = make_door()
    assert (await door.post(rpc(), {**bearer(mint()), "Host": host})).status_code == 200


@pytest.mark.parametrize("host", [
    "evil.example:8000", "evil.example", "127.0.0.1:8001", "127.0.0.1", "localhost",
    "localhost.:8000", "127.0.0.1.:8000", "0.0.0.0:8000", "[::ffff:127.0.0.1]:8000",
    "10.0.0.1:8000", "127.1:8000", "127.0.0.01:8000", "[::1]", "::1:8000", "[localhost]:8000",
    "127.0.0.1:8000:8000", "127.0.0.1:+8000", "127.0.0.1:٨٠٠٠", "", "127.0.0.1:8000@evil",
    "evil.example#@127.0.0.1:8000", "[::1:8000",
])
async def test_foreign_host_is_421_after_the_checks(host: str) -> None:
    door = make_door()
    response = await door.post(rpc(), [("Authorization", f"Bearer {mint()}"),
                                       ("Host", host.encode("utf-8"))])
    assert (response.status_code, error_of(response)) == (421, "misdirected_request")
    assert door.echo.calls == []


@pytest.mark.parametrize("host,status", [
    (b"localhost", 200), (b"127.0.0.1", 200), (b"[::1]", 200), (b"localhost:80", 200),
    (b"localhost:8000", 421), (b"evil.example", 421),
])
async def test_host_without_port_is_port_80(host: bytes, status: int) -> None:
    door = make_door()
    scope = asgi_scope([(b"host", host), (b"authorization", f"Bearer {mint()}".encode())])
    scope["server"] = ("127.0.0.1", 80)
    sent = await call_asgi(door.app, scope, [
        {"type": "http.request", "body": json.dumps(rpc()).encode()}])
    assert sent[0]["status"] == status


async def test_door_without_a_server_port_checks_only_the_name() -> None:
    """A door on a UNIX socket has no port: any loopback name is its own."""
    door = make_door()
    for host, status in ((b"localhost:1234", 200), (b"127.0.0.1", 200), (b"evil:1234", 421)):
        scope = asgi_scope([(b"host", host), (b"authorization", f"Bearer {mint()}".encode())])
        scope["server"] = ("/run/door.sock", None)
        sent = await call_asgi(door.app, scope, [
            {"type": "http.request", "body": json.dumps(rpc()).encode()}])
        assert sent[0]["status"] == status, host


async def test_missing_or_repeated_host_is_421() -> None:
    door = make_door()
    token = f"Bearer {mint()}".encode()
    for hosts in ([], [b"127.0.0.1:8000", b"127.0.0.1:8000"], [b"127.0.0.1:8000", b"evil"]):
        scope = asgi_scope(headers=[(b"authorization", token)] + [(b"host", h) for h in hosts])
        messages = await call_asgi(door.app, scope, [
            {"type": "http.request", "body": json.dumps(rpc()).encode()}])
        assert messages[0]["status"] == 421
    assert door.echo.calls == []


# -- ASGI: lifespan and WebSockets -------------------------------------------------------


async def test_lifespan_passes_through_untouched() -> None:
    door = make_door()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    sent = await call_asgi(door.app, scope, [{"type": "lifespan.startup"}])
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert door.echo.calls == [{"type": "lifespan"}]
    assert CALLER_SCOPE_KEY not in scope


async def test_websocket_with_a_valid_credential_reaches_the_app() -> None:
    door = make_door()
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())], kind="websocket")
    sent = await call_asgi(door.app, scope, [{"type": "websocket.connect"}])
    assert sent[0] == {"type": "websocket.accept"}
    assert json.loads(sent[1]["text"])["caller"]["name"] == "member:planner"


@pytest.mark.parametrize("headers,status", [
    ([], 401),
    ([(b"authorization", b"Bearer nope")], 401),
    ([(b"authorization", b"Bearer " + mint(callee="reviewer").encode())], 403),
])
async def test_websocket_is_refused_before_it_is_accepted(
    headers: list[tuple[bytes, bytes]], status: int,
) -> None:
    door = make_door()
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"), *headers], kind="websocket")
    sent = await call_asgi(door.app, scope, [{"type": "websocket.connect"}])
    assert sent == [{"type": "websocket.close", "code": 1008}]
    assert door.echo.calls == []
    # With the server's denial-response extension, the refusal is the HTTP answer.
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"), *headers], kind="websocket",
                       extensions={"websocket.http.response": {}})
    sent = await call_asgi(door.app, scope, [{"type": "websocket.connect"}])
    assert [m["type"] for m in sent] == ["websocket.http.response.start",
                                         "websocket.http.response.body"]
    assert sent[0]["status"] == status
    assert door.echo.calls == []


async def test_websocket_from_a_foreign_host_is_refused() -> None:
    door = make_door()
    scope = asgi_scope([(b"host", b"evil.example:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())], kind="websocket")
    sent = await call_asgi(door.app, scope, [{"type": "websocket.connect"}])
    assert sent == [{"type": "websocket.close", "code": 1008}]


# -- the policy --------------------------------------------------------------------------


def test_policy_defaults_are_a_public_door() -> None:
    policy = AuthPolicy()
    assert (policy.authenticated, policy.operator, policy.bearers, policy.jwt_issuers,
            policy.verifier, policy.member, policy.accept_peer_tasks, policy.max_body) == (
        False, None, (), (), None, None, False, 1 << 20)


@pytest.mark.parametrize("changes,fault", [
    ({"verifier": FormationVerifier(KEY.public_bytes, FORMATION)}, "member="),
    ({"member": "Coder"}, "member must match"),
    ({"max_body": 0}, "max_body"),
])
def test_policy_refuses_inconsistent_settings(changes: dict[str, Any], fault: str) -> None:
    with pytest.raises(ValueError, match=fault):
        AuthPolicy(authenticated=True, **changes)
