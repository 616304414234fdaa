"""Attacks on DoorAuth ("Bad input gets a clear answer, never a 500"), each named after
the attack. The test door and its helpers are in tests/support/auth.py."""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import httpx
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.auth.credentials import DeclaredBearer, JwtIssuer, OperatorToken
from gateway.auth.door_auth import REFUSALS, DoorAuth
from gateway.auth.tokens import FormationKey, FormationVerifier, b64url_encode
from tests.support.auth import (
    CI_TOKEN,
    FORMATION,
    INVALID_CHALLENGE,
    KEY,
    OTHER_FORMATION,
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

# -- the Authorization header ------------------------------------------------------------


async def test_no_authorization_header_is_401_unauthenticated() -> None:
    door = make_door()
    response = await door.post(rpc())
    assert response.status_code == 401
    assert response.json() == {
        "error": "unauthenticated",
        "message": "This door needs a credential: send 'Authorization: Bearer <token>'."}
    assert response.headers["www-authenticate"] == 'Bearer realm="murmur"'
    assert response.headers["content-type"] == "application/json"
    assert door.echo.calls == []


@pytest.mark.parametrize("value", [
    "Basic cGxhbm5lcjpzZWNyZXQ=", "Token {t}", "", "Bearer", "Bearer ", "Bearer  {t}",
    "bearer {t}", "BEARER {t}", "Bearer\t{t}", "Bearer {t} ", " Bearer {t}", "Bearer {t} x",
    "Bearer {t},Bearer {t}", "Bearer:{t}", "{t}", "Bearer \"{t}\"",
])
async def test_authorization_not_exactly_bearer_token_is_invalid_token(value: str) -> None:
    door = make_door()
    response = await door.post(rpc(), [("Authorization", value.format(t=mint()))])
    assert_invalid_token(response)
    assert door.echo.calls == []


@pytest.mark.parametrize("second", ["valid", "operator", "garbage"])
async def test_two_authorization_headers_are_invalid_token(second: str) -> None:
    door = make_door()
    other = {"valid": mint(), "operator": door.operator.value, "garbage": "x"}[second]
    response = await door.post(rpc(), [("Authorization", f"Bearer {mint()}"),
                                       ("Authorization", f"Bearer {other}")])
    assert_invalid_token(response)
    assert door.echo.calls == []


async def test_token_in_the_query_string_is_ignored() -> None:
    door = make_door()
    for name in ("access_token", "token", "authorization"):
        async with door.client() as client:
            response = await client.post("/", json=rpc(), params={name: mint()})
        assert (response.status_code, error_of(response)) == (401, "unauthenticated")
    assert door.echo.calls == []


async def test_token_in_a_cookie_is_ignored() -> None:
    door = make_door()
    response = await door.post(rpc(), {"Cookie": f"access_token={mint()}; token={mint()}"})
    assert (response.status_code, error_of(response)) == (401, "unauthenticated")
    assert door.echo.calls == []


# -- formation tokens at the door --------------------------------------------------------


def parts() -> tuple[str, str, str]:
    prefix, payload, signature = mint().split(".")
    return prefix, payload, signature


@pytest.mark.parametrize("shape", [
    "mft2.{q}.{s}", "v4.public.{q}", "v4.public.{q}.{s}", "MFT1.{q}.{s}", "{p}.{q}",
    "{p}.{q}.{s}.{s}", "{p}..{s}", "{p}.{q}.", "{p}.", "{p}", "{p}.{q}.{s}=", "{p}.{q}=.{s}",
])
async def test_malformed_formation_tokens_are_invalid_token(shape: str) -> None:
    prefix, payload, signature = parts()
    door = make_door()
    response = await door.post(rpc(), bearer(shape.format(p=prefix, q=payload, s=signature)))
    assert_invalid_token(response)


async def test_token_from_another_formations_key_is_invalid_token() -> None:
    door = make_door()
    assert_invalid_token(await door.post(rpc(), bearer(mint(key=FormationKey.generate()))))


async def test_token_from_another_formation_id_is_invalid_token() -> None:
    door = make_door()
    assert_invalid_token(await door.post(rpc(), bearer(mint(formation=OTHER_FORMATION))))


async def test_token_of_an_earlier_launch_is_invalid_token() -> None:
    earlier = mint()
    relaunched = FormationVerifier(FormationKey.generate().public_bytes, OTHER_FORMATION)
    door = make_door(verifier=relaunched)
    assert_invalid_token(await door.post(rpc(), bearer(earlier)))


async def test_door_in_no_formation_refuses_every_formation_token() -> None:
    door = make_door(verifier=None, member=None)
    for token in (mint(), mint(callee="reviewer"), mint(formation=OTHER_FORMATION)):
        assert_invalid_token(await door.post(rpc(), bearer(token)))
    # The door's other credentials still work.
    assert (await door.post(rpc(), bearer(door.operator.value))).status_code == 200
    assert (await door.post(rpc(), bearer(CI_TOKEN))).status_code == 200


async def test_child_door_with_a_verifier_but_no_formation_refuses_formation_tokens() -> None:
    door = make_door(verifier=FormationVerifier(KEY.public_bytes, None))
    assert_invalid_token(await door.post(rpc(), bearer(mint())))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(index=st.integers(0, 10_000), bit=st.integers(0, 7))
async def test_single_bit_flip_of_a_valid_token_is_invalid_token(index: int, bit: int) -> None:
    token = mint()
    index %= len(token)
    flipped = token[:index] + chr(ord(token[index]) ^ (1 << bit)) + token[index + 1:]
    door = make_door()
    async with door.client() as client:
        response = await client.post("/", json=rpc(),
                                      headers=[(b"Authorization",
                                                b"Bearer " + flipped.encode("utf-8"))])
    assert_invalid_token(response)


async def test_truncated_signature_is_invalid_token() -> None:
    door = make_door()
    for cut in (1, 2, 40):
        assert_invalid_token(await door.post(rpc(), bearer(mint()[:-cut])))


@pytest.mark.parametrize("callee", ["Coder", "coder ", "c\u043eder", "ｃｏｄｅｒ", "coder\u200b"])
async def test_to_variants_are_invalid_token(callee: str) -> None:
    """Validly signed, but "to" is not a member name: refused as invalid, never 403."""
    payload = json.dumps({"formation": FORMATION, "from": "planner", "to": callee},
                         sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    signed = f"mft1.{b64url_encode(payload)}"
    token = f"{signed}.{b64url_encode(KEY._private.sign(signed.encode()))}"
    door = make_door()
    assert_invalid_token(await door.post(rpc(), bearer(token)))


async def test_token_for_another_members_door_is_403_naming_only_the_caller() -> None:
    door = make_door()
    response = await door.post(rpc(), bearer(mint(caller="planner", callee="reviewer")))
    assert (response.status_code, error_of(response)) == (403, "not_permitted")
    message = response.json()["message"]
    assert "planner" in message
    assert "reviewer" not in message and "coder" not in message
    assert "www-authenticate" not in response.headers
    assert door.echo.calls == []


async def test_huge_formation_token_is_refused_before_any_crypto() -> None:
    door = make_door()
    verifier = door.app.policy.verifier
    assert verifier is not None
    calls: list[int] = []
    verifier._check = lambda signature, message: bool(calls.append(1))
    for token in ("mft1." + "A" * 65_536, mint() + "A" * 65_536):
        assert_invalid_token(await door.post(rpc(), bearer(token)))
    assert calls == []


async def test_huge_non_formation_token_is_refused_without_trying_jwt() -> None:
    tried: list[int] = []

    class CountingIssuer(JwtIssuer):
        def verify(self, token: str) -> dict[str, Any]:
            tried.append(1)
            return super().verify(token)

    door = make_door(jwt_issuers=(jwt_issuer(kind=CountingIssuer),))
    assert_invalid_token(await door.post(rpc(), bearer("a" * 30_000 + "." + "b.c")))
    assert tried == []
    assert (await door.post(rpc(), bearer(corp_jwt()))).status_code == 200
    assert tried == [1]


async def test_jwt_alg_none_at_the_door_is_invalid_token() -> None:
    door = make_door()
    token = jwt.encode({"iss": "https://id.example", "aud": "coder", "exp": 2**40}, None,
                       algorithm="none")
    assert_invalid_token(await door.post(rpc(), bearer(token)))


async def test_every_unacceptable_token_gets_the_same_answer() -> None:
    door = make_door()
    prefix, payload, signature = parts()
    answers = set()
    for token in ("nonsense", mint(key=FormationKey.generate()), f"{prefix}.{payload}",
                  OperatorToken.generate().value, CI_TOKEN + "x", corp_jwt()[:-4] + "AAAA",
                  "mft1." + "A" * 600):
        response = await door.post(rpc(), bearer(token))
        answers.add((response.status_code, response.text, response.headers["www-authenticate"]))
    assert len(answers) == 1


# -- the order of the checks -------------------------------------------------------------

CHECKS = ["unauthenticated", "invalid_token", "not_permitted", "payload_too_large",
          "insufficient_scope", "peer_not_accepted", "misdirected_request"]


class ReadSpy:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.reads = 0

    async def __call__(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads == 1:
            return {"type": "http.request", "body": self.body, "more_body": False}
        return {"type": "http.disconnect"}


@pytest.mark.parametrize("credential,method,oversized,accepts_peers,host", list(
    itertools.product(["missing", "invalid", "wrong door", "valid"], ["in scope", "out of scope"],
                      [False, True], [True, False], ["loopback", "foreign"])))
async def test_the_first_failing_check_decides(credential: str, method: str, oversized: bool,
                                               accepts_peers: bool, host: str) -> None:
    door = make_door(accept_peer_tasks=accepts_peers, max_body=400)
    headers = [(b"host", b"127.0.0.1:8000" if host == "loopback" else b"evil.example:8000"),
               (b"a2a-version", b"1.0")]
    token = {"missing": None, "invalid": "mft1.forged.x", "wrong door": mint(callee="reviewer"),
             "valid": mint()}[credential]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    call = rpc("GetTask" if method == "in scope" else "murmur.StopSession",
               pad="x" * (500 if oversized else 0))
    spy = ReadSpy(json.dumps(call).encode())
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await door.app(asgi_scope(headers), spy, send)
    failing = {
        "unauthenticated": credential == "missing",
        "invalid_token": credential == "invalid",
        "not_permitted": credential == "wrong door",
        "payload_too_large": oversized,
        "insufficient_scope": method == "out of scope",
        "peer_not_accepted": not accepts_peers,
        "misdirected_request": host == "foreign",
    }
    expected = next((check for check in CHECKS if failing[check]), None)
    if expected is None:
        assert sent[0]["status"] == 200
        assert len(door.echo.calls) == 1
        return
    assert sent[0]["status"] == REFUSALS[expected].status
    assert json.loads(sent[1]["body"])["error"] == expected
    assert door.echo.calls == []
    # Nothing after the failing check was read: the credential checks read no body.
    if CHECKS.index(expected) < CHECKS.index("payload_too_large"):
        assert spy.reads == 0


@pytest.mark.parametrize("headers", [
    [], [(b"authorization", b"Bearer nope")],
    [(b"authorization", b"Bearer " + mint(callee="reviewer").encode())],
])
async def test_authentication_is_decided_before_reading_the_body(
    headers: list[tuple[bytes, bytes]],
) -> None:
    door = make_door()

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read before authentication")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await door.app(asgi_scope([(b"host", b"127.0.0.1:8000"), *headers]), receive, send)
    assert sent[0]["status"] in (401, 403)


# -- methods and scopes ------------------------------------------------------------------


@pytest.mark.parametrize("method", [
    "SendStreamingMessage", "murmur.StopSession", "murmur.WatchSession", "getTask",
    "sendmessage", "GetTask ", "", "tasks/get", "no.such.method", "AgentCard\u0000",
])
async def test_methods_outside_the_formation_scopes_are_insufficient_scope(method: str) -> None:
    door = make_door()
    response = await door.post(rpc(method), bearer_1_0(mint()))
    assert (response.status_code, error_of(response)) == (403, "insufficient_scope")
    assert response.headers["www-authenticate"] == (
        'Bearer realm="murmur", error="insufficient_scope"')
    message = response.json()["message"]
    assert "member:planner" in message
    if method not in ("SendStreamingMessage", "murmur.StopSession", "murmur.WatchSession"):
        assert method.strip() == "" or method not in message  # unknown names are not echoed
    assert door.echo.calls == []


async def test_declared_bearer_outside_its_scopes_is_insufficient_scope() -> None:
    door = make_door()
    response = await door.post(rpc("CancelTask"), bearer_1_0(CI_TOKEN))
    assert (response.status_code, error_of(response)) == (403, "insufficient_scope")
    assert "bearer:ci" in response.json()["message"]
    response = await door.post(rpc("CancelTask"), bearer_1_0(corp_jwt()))
    assert "jwt:corp" in response.json()["message"]


async def test_operator_may_call_a_lowercase_get_task_and_the_app_answers() -> None:
    door = make_door()
    response = await door.post(rpc("getTask"), bearer(door.operator.value))
    assert response.status_code == 200
    assert door.echo.calls[0]["rpc"]["method"] == "getTask"


async def test_peer_task_at_a_door_that_takes_none_is_peer_not_accepted() -> None:
    door = make_door(accept_peer_tasks=False)
    for method in ("SendMessage", "GetTask"):
        response = await door.post(rpc(method), bearer(mint()))
        assert (response.status_code, error_of(response)) == (403, "peer_not_accepted")
    assert (await door.post(rpc("SendMessage"), bearer(door.operator.value))).status_code == 200
    assert (await door.post(rpc("SendMessage"), bearer(CI_TOKEN))).status_code == 200
    assert door.echo.calls and all(c["caller"]["origin"] != "peer" for c in door.echo.calls)


# -- the JSON-RPC body -------------------------------------------------------------------


def rpc_error(response: httpx.Response) -> tuple[Any, int]:
    document = response.json()
    assert document["jsonrpc"] == "2.0"
    return document["id"], document["error"]["code"]


@pytest.mark.parametrize("who", ["member", "operator"])
async def test_batch_with_one_allowed_and_one_forbidden_call_is_refused_whole(who: str) -> None:
    door = make_door()
    token = mint() if who == "member" else door.operator.value
    response = await door.post([rpc("GetTask"), rpc("murmur.StopSession", request_id=2)],
                               bearer(token))
    assert response.status_code == 200
    assert rpc_error(response) == (None, -32600)
    assert door.echo.calls == []


@pytest.mark.parametrize("batch", [[], [{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}],
                                   [1, 2], [[]]])
async def test_any_batch_is_invalid_request(batch: list[Any]) -> None:
    door = make_door()
    response = await door.post(batch, bearer(mint()))
    assert rpc_error(response) == (None, -32600)
    assert door.echo.calls == []


@pytest.mark.parametrize("content", [
    b"", b"{", b"{}}", b'{"method": "GetTask"', b"\xff\xfe{}", b"{'method': 'GetTask'}",
    b'{"method": "GetTask"} {"method": "GetTask"}', b"[" * 100_000, b'{"a": NaN',
    "\ufeff{}".encode(),
])
async def test_malformed_json_is_parse_error(content: bytes) -> None:
    door = make_door(max_body=1 << 20)
    response = await door.post(headers=bearer(mint()), content=content)
    assert response.status_code == 200
    assert rpc_error(response) == (None, -32700)
    assert door.echo.calls == []


@pytest.mark.parametrize("document", [
    {}, {"jsonrpc": "2.0", "id": 1}, {"method": 1}, {"method": None}, {"method": ["GetTask"]},
    {"method": {"name": "GetTask"}}, "GetTask", 42, None, True,
])
async def test_missing_or_non_string_method_is_invalid_request(document: Any) -> None:
    door = make_door()
    response = await door.post(headers=bearer(mint()), content=json.dumps(document).encode())
    assert rpc_error(response) == (None, -32600)
    assert door.echo.calls == []


async def test_oversized_body_is_413() -> None:
    door = make_door(max_body=1024)
    call = rpc(pad="x" * 2000)
    response = await door.post(call, bearer(mint()))
    assert (response.status_code, error_of(response)) == (413, "payload_too_large")
    assert "1024" in response.json()["message"]
    assert door.echo.calls == []
    fits = rpc(pad="x" * (1024 - len(json.dumps(rpc(pad="")))))
    assert len(json.dumps(fits)) == 1024
    assert (await door.post(fits, bearer(mint()))).status_code == 200


async def test_content_length_past_the_limit_is_413_before_reading() -> None:
    door = make_door(max_body=1024)

    async def receive() -> dict[str, Any]:
        raise AssertionError("a body announced as too large was read")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1:8000"), (b"content-length", b"99999999999"),
               (b"authorization", f"Bearer {mint()}".encode())]
    await door.app(asgi_scope(headers), receive, send)
    assert sent[0]["status"] == 413


async def test_streamed_body_past_the_limit_is_413() -> None:
    door = make_door(max_body=1000)
    chunks = [{"type": "http.request", "body": b"x" * 300, "more_body": True}] * 10
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())])
    sent = await call_asgi(door.app, scope, chunks)
    assert sent[0]["status"] == 413
    assert door.echo.calls == []


async def test_streamed_body_within_the_limit_is_joined_and_replayed() -> None:
    door = make_door()
    content = json.dumps(rpc()).encode()
    chunks = [{"type": "http.request", "body": content[i:i + 7], "more_body": True}
              for i in range(0, len(content), 7)] + [{"type": "http.request", "body": b""}]
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())])
    sent = await call_asgi(door.app, scope, chunks)
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["body"] == content.decode()


async def test_client_gone_while_the_body_is_read_gets_no_answer() -> None:
    door = make_door()
    scope = asgi_scope([(b"host", b"127.0.0.1:8000"),
                        (b"authorization", f"Bearer {mint()}".encode())])
    sent = await call_asgi(door.app, scope, [{"type": "http.disconnect"}])
    assert sent == [] and door.echo.calls == []


# -- logs, exceptions and secrets --------------------------------------------------------


@pytest.mark.parametrize("path", ["/x\r\nINFO forged line", "/\x1b[31mred\x1b[0m", "/a\nb",
                                  "/\u2028next", "/\x9b31m", "/\x00nul"])
async def test_crlf_and_ansi_in_the_path_never_reach_a_log_unescaped(
    path: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.auth.door_auth")
    door = make_door()
    for headers in ([], [(b"authorization", b"Bearer nope")],
                    [(b"authorization", b"Bearer " + mint(callee="reviewer").encode())]):
        scope = asgi_scope([(b"host", b"127.0.0.1:8000"), *headers], path=path, method="GET")
        await call_asgi(door.app, scope, [{"type": "http.request", "body": b""}])
    assert len(caplog.records) == 3
    for record in caplog.records:
        line = record.getMessage()
        for raw in ("\r", "\n", "\x1b", "\u2028", "\x9b", "\x00"):
            assert raw not in line
    assert "\\x" in caplog.records[0].getMessage() or "\\u" in caplog.records[0].getMessage()


async def test_token_in_the_path_is_redacted_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.auth.door_auth")
    door = make_door()
    token = mint()
    async with door.client() as client:
        await client.get(f"/leak/{token}")
        await client.get(f"/leak/{door.operator.value}")
    text = caplog.text
    assert caplog.records and "[redacted]" in text
    assert token not in text and door.operator.value not in text
    for part in token.split(".")[1:]:
        assert part not in text


@pytest.mark.parametrize("error", [RuntimeError, ValueError, KeyError, TypeError, MemoryError,
                                   RecursionError])
async def test_exception_inside_verification_never_becomes_a_200(
    error: type[Exception], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.auth.door_auth")
    door = make_door()
    token = mint()
    verifier = door.app.policy.verifier
    assert verifier is not None

    def explode(signature: bytes, message: bytes) -> bool:
        raise error(f"boom while checking {message.decode()}")

    verifier._check = explode  # deep inside verification: the signature primitive
    response = await door.post(rpc(), bearer(token))
    assert_invalid_token(response)
    assert door.echo.calls == []
    assert error.__name__ in caplog.text
    assert "boom" not in caplog.text and token not in caplog.text


async def test_exception_in_any_credential_check_is_invalid_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.auth.door_auth")

    class BrokenOperator(OperatorToken):
        def matches(self, presented: str) -> bool:
            raise RuntimeError(f"operator check broke on {presented}")

    class BrokenBearer(DeclaredBearer):
        def matches(self, presented: str) -> bool:
            raise TypeError(f"bearer check broke on {presented}")

    for changes in ({"operator": BrokenOperator(OperatorToken.generate().value)},
                    {"bearers": (BrokenBearer("ci", CI_TOKEN),), "operator": None}):
        door = make_door(**changes)
        response = await door.post(rpc(), bearer("some-presented-token"))
        assert_invalid_token(response)
    assert "some-presented-token" not in caplog.text


async def test_no_token_in_any_response_header_log_or_app_view(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    door = make_door(accept_peer_tasks=False, max_body=300)
    secrets = [mint(), mint(callee="reviewer"), mint(key=FormationKey.generate()),
               mint(formation=OTHER_FORMATION), door.operator.value, CI_TOKEN, corp_jwt(),
               OperatorToken.generate().value]
    seen: list[str] = []
    async with door.client() as client:
        for token in secrets:
            for method, path, body in (("POST", "/", rpc()), ("POST", "/", rpc("nope")),
                                       ("POST", "/", [rpc()]), ("POST", "/", rpc(pad="x" * 400)),
                                       ("GET", "/.well-known/agent-card.json", None),
                                       ("GET", "/resources/files/x", None)):
                for host in ("127.0.0.1:8000", "evil.example"):
                    response = await client.request(
                        method, path, json=body,
                        headers={**bearer(token), "Host": host, "x-murmur-task-trust": token})
                    seen.append(response.text)
                    seen.extend(f"{k}: {v}" for k, v in response.headers.items())
    seen.append(caplog.text)
    seen.extend(json.dumps(call) for call in door.echo.calls)
    everything = "\n".join(seen)
    for token in secrets:
        for piece in {token, *token.split(".")}:
            if len(piece) >= 12:
                assert piece not in everything


async def test_refusals_are_logged_with_code_and_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.auth.door_auth")
    door = make_door()
    await door.post(rpc("murmur.StopSession"), bearer_1_0(mint()))
    assert "403 insufficient_scope member:planner" in caplog.text


# -- one table ---------------------------------------------------------------------------


def test_every_refusal_is_in_one_table_with_its_status() -> None:
    assert {code: r.status for code, r in REFUSALS.items() if r.rpc_code is None} == {
        "unauthenticated": 401, "invalid_token": 401, "not_permitted": 403,
        "insufficient_scope": 403, "peer_not_accepted": 403, "payload_too_large": 413,
        "misdirected_request": 421, "depth_exceeded": 403, "limit_reached": 403,
        "rate_limited": 429,
    }
    assert {code: r.rpc_code for code, r in REFUSALS.items() if r.rpc_code is not None} == {
        "parse_error": -32700, "batch_refused": -32600, "invalid_request": -32600,
    }
    assert REFUSALS["unauthenticated"].www_authenticate == 'Bearer realm="murmur"'
    assert REFUSALS["invalid_token"].www_authenticate == INVALID_CHALLENGE
    assert REFUSALS["insufficient_scope"].www_authenticate == (
        'Bearer realm="murmur", error="insufficient_scope"')


def test_door_auth_is_pure_asgi() -> None:
    from starlette.middleware.base import BaseHTTPMiddleware

    assert not issubclass(DoorAuth, BaseHTTPMiddleware)


# -- the Host on a listener beyond loopback ---------------------------------------------


async def test_a_public_name_with_a_port_that_is_not_a_number_is_refused_421() -> None:
    from gateway.auth.door_auth import AuthPolicy
    from gateway.door.app import DoorSettings, build_door
    from tests.support.door import card_info

    async def agent(task: Any) -> str:
        return "ok"

    door = build_door(agent, DoorSettings(card=card_info()), policy=AuthPolicy(
        public_port=9443, public_hosts=("door.example",)))
    transport = httpx.ASGITransport(app=door.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://door.example:9443",
                                 headers={"A2A-Version": "1.0"}) as client:
        for host, status in (("door.example:9443", 200), ("door.example:8080", 200),
                             ("door.example:abc", 421), ("door.example:", 421),
                             ("door.example:123456", 421), ("other.example:9443", 421)):
            answer = await client.get("/.well-known/agent-card.json", headers={"Host": host})
            assert answer.status_code == status, host


@pytest.mark.parametrize("method", ["NonExistentMethod", "tasks/get", "getTask", ""])
async def test_a_declared_credential_calling_no_method_gets_method_not_found(
        method: str) -> None:
    """A2A 1.0 section 9.5 (the TCK's CORE-ERR-001): a name no method of the door has is
    no scope the caller lacks. DoorAuth lets it through and the app says -32601; a
    formation token's call of it stays 403 (the test above)."""
    door = make_door()
    response = await door.post(rpc(method), bearer_1_0(CI_TOKEN))
    assert response.status_code == 200
    assert [call["rpc"]["method"] for call in door.echo.calls] == [method], "handed to the app"
