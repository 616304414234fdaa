"""DoorAuth's fast paths (the per-door memory of verified formation tokens, the one-message
body, the Content-Length pre-check, the replayed receive) decide exactly what the full
checks decide. The shared test door and its helpers are in tests/support/auth.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

import gateway.auth.door_auth
from gateway.auth.credentials import JwtIssuer, OperatorToken
from gateway.auth.door_auth import DoorAuth
from gateway.auth.tokens import FormationVerifier
from tests.support.auth import (
    CI_TOKEN,
    KEY,
    EchoApp,
    asgi_scope,
    assert_invalid_token,
    bearer,
    bearer_1_0,
    call_asgi,
    corp_jwt,
    error_of,
    jwt_issuer,
    make_door,
    mint,
    rpc,
)

LOOPBACK = (b"host", b"127.0.0.1:8000")


def authorization(token: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {token}".encode())


async def served(app: Any, headers: list[tuple[bytes, bytes]], body: bytes | None = None,
                 path: str = "/") -> list[dict[str, Any]]:
    """What ``app`` sends for one POST with ``body`` (default: a GetTask call)."""
    content = json.dumps(rpc()).encode() if body is None else body
    scope = asgi_scope(headers, path=path)
    return await call_asgi(app, scope, [{"type": "http.request", "body": content}])


# -- the memory of verified formation tokens ---------------------------------------------


async def test_remembered_formation_token_takes_its_trust_from_each_request() -> None:
    door = make_door()
    token = mint()
    trusted = [authorization(token), (b"x-murmur-task-trust", b"trusted"), LOOPBACK]
    untrusted = [authorization(token), LOOPBACK]
    for headers, trust in ((trusted, "trusted"), (untrusted, "untrusted"),
                           (trusted, "trusted"), (untrusted, "untrusted")):
        sent = await served(door.app, headers)
        assert sent[0]["status"] == 200
        assert json.loads(sent[1]["body"])["caller"]["trust"] == trust
    twice = [authorization(token), (b"x-murmur-task-trust", b"trusted"),
             (b"x-murmur-task-trust", b"trusted"), LOOPBACK]
    sent = await served(door.app, twice)
    assert json.loads(sent[1]["body"])["caller"]["trust"] == "untrusted"


async def test_two_authorization_headers_after_a_remembered_token_are_invalid_token() -> None:
    door = make_door()
    token = mint()
    assert (await door.post(rpc(), bearer(token))).status_code == 200
    response = await door.post(rpc(), [("Authorization", f"Bearer {token}"),
                                       ("Authorization", f"Bearer {token}")])
    assert_invalid_token(response)


@pytest.mark.parametrize("value", ["bearer {t}", "Bearer  {t}", "Bearer {t} ", "BEARER {t}"])
async def test_remembered_token_behind_another_scheme_spelling_is_invalid_token(
    value: str,
) -> None:
    door = make_door()
    token = mint()
    assert (await door.post(rpc(), bearer(token))).status_code == 200
    assert_invalid_token(await door.post(rpc(), [("Authorization", value.format(t=token))]))


async def test_remembered_token_is_still_held_to_its_scopes_peers_and_host() -> None:
    door = make_door(max_body=400)
    token = mint()
    assert (await door.post(rpc(), bearer(token))).status_code == 200
    response = await door.post(rpc("murmur.StopSession"), bearer_1_0(token))
    assert (response.status_code, error_of(response)) == (403, "insufficient_scope")
    response = await door.post(rpc(pad="x" * 500), bearer(token))
    assert (response.status_code, error_of(response)) == (413, "payload_too_large")
    response = await door.post(rpc(), {**bearer(token), "Host": "evil.example:8000"})
    assert (response.status_code, error_of(response)) == (421, "misdirected_request")
    response = await door.post([rpc()], bearer(token))
    assert response.json()["error"]["code"] == -32600
    assert len(door.echo.calls) == 1


async def test_remembered_token_at_a_door_that_takes_no_peer_tasks_is_refused_each_time(
) -> None:
    door = make_door(accept_peer_tasks=False)
    token = mint()
    for _ in range(3):
        response = await door.post(rpc(), bearer(token))
        assert (response.status_code, error_of(response)) == (403, "peer_not_accepted")
    assert door.echo.calls == []


async def test_token_for_another_members_door_is_never_remembered() -> None:
    door = make_door()
    token = mint(callee="reviewer")
    for _ in range(3):
        response = await door.post(rpc(), bearer(token))
        assert (response.status_code, error_of(response)) == (403, "not_permitted")
    assert door.app._admitted == {}


async def test_refused_tokens_are_never_remembered() -> None:
    door = make_door(verifier=FormationVerifier(KEY.public_bytes, "frm_another"))
    for token in (mint(), "mft1.forged.x", "nonsense", door.operator.value + "x"):
        assert_invalid_token(await door.post(rpc(), bearer(token)))
    assert door.app._admitted == {}


async def test_a_door_in_no_formation_remembers_nothing() -> None:
    door = make_door(verifier=None, member=None)
    for _ in range(2):
        assert_invalid_token(await door.post(rpc(), bearer(mint())))
    assert door.app._admitted == {}


async def test_memory_of_tokens_is_bounded_and_drops_the_oldest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gateway.auth.door_auth, "_ADMITTED_LIMIT", 3)
    door = make_door()
    tokens = [mint(caller=f"member-{i}") for i in range(5)]
    for token in tokens:
        sent = await served(door.app, [authorization(token), LOOPBACK])
        assert sent[0]["status"] == 200
    remembered = door.app._admitted
    assert len(remembered) == 3
    assert list(remembered) == [f"Bearer {t}".encode() for t in tokens[2:]]
    # A token dropped from the memory is verified again, and served again.
    sent = await served(door.app, [authorization(tokens[0]), LOOPBACK])
    assert json.loads(sent[1]["body"])["caller"]["name"] == "member:member-0"
    assert len(door.app._admitted) == 3


async def test_each_door_has_its_own_memory_of_tokens() -> None:
    first = make_door()
    token = mint()
    assert (await first.post(rpc(), bearer(token))).status_code == 200
    # Another door (another member, another key) never accepts it.
    second = make_door(member="reviewer")
    response = await second.post(rpc(), bearer(token))
    assert (response.status_code, error_of(response)) == (403, "not_permitted")
    relaunched = make_door(verifier=FormationVerifier(KEY.public_bytes, "frm_relaunched"))
    assert_invalid_token(await relaunched.post(rpc(), bearer(token)))


async def test_operator_token_is_compared_on_every_request() -> None:
    compared: list[int] = []

    class CountingOperator(OperatorToken):
        def matches(self, presented: str) -> bool:
            compared.append(1)
            return super().matches(presented)

    operator = CountingOperator(OperatorToken.generate().value)
    door = make_door(operator=operator)
    for _ in range(3):
        assert (await door.post(rpc(), bearer(operator.value))).status_code == 200
    assert compared == [1, 1, 1]
    assert door.app._admitted == {}
    assert_invalid_token(await door.post(rpc(), bearer(operator.value[:-1] + "!")))


async def test_declared_bearer_and_jwt_are_checked_on_every_request() -> None:
    tried: list[int] = []

    class CountingIssuer(JwtIssuer):
        def verify(self, token: str) -> dict[str, Any]:
            tried.append(1)
            return super().verify(token)

    door = make_door(jwt_issuers=(jwt_issuer(kind=CountingIssuer),))
    token = corp_jwt()
    for _ in range(3):
        assert (await door.post(rpc(), bearer(token))).status_code == 200
        assert (await door.post(rpc(), bearer(CI_TOKEN))).status_code == 200
    assert tried == [1, 1, 1]
    assert door.app._admitted == {}


# -- the body ----------------------------------------------------------------------------


async def test_first_body_message_past_the_limit_is_413_before_reading_more() -> None:
    door = make_door(max_body=100)
    reads: list[int] = []
    chunks = [{"type": "http.request", "body": b"x" * 101, "more_body": True},
              {"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        reads.append(1)
        return chunks[len(reads) - 1]

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await door.app(asgi_scope([LOOPBACK, authorization(mint())]), receive, send)
    assert sent[0]["status"] == 413
    assert reads == [1]
    assert door.echo.calls == []


@pytest.mark.parametrize("content_length,status", [
    (b"1025", 413), (b"1024", 200), (b"999", 200), (b"0000000000000000999", 200),
    (b"00000000000000001025", 200), (b"1e3", 200), (b"-5", 200), (b"", 200),
])
async def test_content_length_is_judged_by_its_value(content_length: bytes,
                                                      status: int) -> None:
    """Past the limit: refused unread. Anything else (leading zeros, a value that is not a
    number of at most 19 digits) is left to the server; the body read decides."""
    door = make_door(max_body=1024)
    headers = [LOOPBACK, authorization(mint()), (b"content-length", content_length)]
    sent = await served(door.app, headers)
    assert sent[0]["status"] == status


async def test_body_in_many_messages_is_joined_once_in_order() -> None:
    door = make_door(max_body=1000)
    content = json.dumps(rpc(pad="0123456789" * 40)).encode()
    chunks = [{"type": "http.request", "body": content[i:i + 100], "more_body": True}
              for i in range(0, len(content), 100)]
    chunks[-1]["more_body"] = False
    sent = await call_asgi(door.app, asgi_scope([LOOPBACK, authorization(mint())]), chunks)
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["body"] == content.decode()


async def test_client_gone_after_the_first_body_message_gets_no_answer() -> None:
    door = make_door()
    chunks = [{"type": "http.request", "body": b'{"jsonrpc":', "more_body": True},
              {"type": "http.disconnect"}]
    sent = await call_asgi(door.app, asgi_scope([LOOPBACK, authorization(mint())]), chunks)
    assert sent == [] and door.echo.calls == []


async def test_replayed_receive_gives_the_body_once_then_the_clients_messages() -> None:
    received: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        received.append(await receive())
        received.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    door = make_door()
    guarded = DoorAuth(app, door.app.policy)
    content = json.dumps(rpc()).encode()
    sent = await served(guarded, [LOOPBACK, authorization(mint())], content)
    assert sent[0]["status"] == 204
    assert received == [{"type": "http.request", "body": content, "more_body": False},
                        {"type": "http.disconnect"}]


async def test_a_non_rpc_request_reaches_the_app_with_the_clients_own_receive() -> None:
    door = make_door()
    echo = EchoApp()
    guarded = DoorAuth(echo, door.app.policy)
    scope = asgi_scope([LOOPBACK, authorization(mint())], path="/elsewhere")
    sent = await call_asgi(guarded, scope, [{"type": "http.request", "body": b"raw bytes"}])
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["body"] == "raw bytes"
    assert echo.calls[0]["rpc"] is None
