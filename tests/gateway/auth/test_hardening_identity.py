"""Issue 10, identities and secrets: attacks on who a caller is and on what only the
runtime holds, each test named after its attack.

* Door addresses (item 7): only the runtime holds the callees' real door URLs. A failed
  call, through ``task.call_member`` or ``task.http``, shows the agent the callee's
  virtual address, never ``127.0.0.1:<port>``: in the error's text, repr, args and
  exception chain, in the calling task's result and in the ``member_call`` records.
  The calling member runs in-process as the runtime builds it (``python_agent``,
  ``launcher.member.calls``, the real door); the callee's door is a loopback port that
  is bound and never listens, so every connection to it is refused.
* JWT subjects (item 9): two tokens of one issuer, ``sub=alice`` and ``sub=bob``, are
  two task owners; the real door, through the real DoorAuth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jwt
import pytest

from gateway.auth.credentials import DeclaredBearer
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.task_record import message_text
from gateway.door.tasks import GateConfig, TaskRun
from gateway.proxy.aiohttp_transport import AiohttpTransport
from gateway.proxy.call_member import CallFailed, MemberCalls
from gateway.proxy.formation import FormationClient, FormationTransport
from gateway.trace.bus import TraceBus
from launcher.member.calls import formation_transport, task_calls
from launcher.member.capsule import AgentEnvironment, TaskContext, python_agent
from tests.support.auth import JWT_KEY, assert_invalid_token, jwt_issuer
from tests.support.door import A2A_HEADERS, BASE_URL, card_info, client_for, rpc, serve
from tests.support.proxy_fakes import Doors

CODER_TOKEN = "mft1.Y29kZXItcGF5bG9hZA.c2lnbmF0dXJlLWNvZGVy"
CODER = "http://coder.formation.invalid"


# -- helpers -----------------------------------------------------------------------------


@contextlib.contextmanager
def gone_door() -> Iterator[int]:
    """A loopback port bound and never listening: connections to it are refused, and no
    other process can take the port while the test runs."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def exception_texts(exc: BaseException) -> list[str]:
    """The text, repr and args of ``exc`` and of every exception on its chain (causes
    and contexts, suppressed ones too), plus the URL of any request they carry."""
    texts: list[str] = []
    pending: list[BaseException] = [exc]
    seen: list[BaseException] = []
    while pending:
        current = pending.pop()
        if any(current is other for other in seen):
            continue
        seen.append(current)
        texts += [str(current), repr(current), repr(current.args)]
        if isinstance(current, httpx.RequestError):
            with contextlib.suppress(RuntimeError):     # no request attached
                texts.append(str(current.request.url))
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return texts


def assert_names_no_door(texts: list[str], port: int) -> None:
    for text in texts:
        assert "127.0.0.1" not in text, text
        assert f":{port}" not in text and f", {port}" not in text, text


def inner_of(kind: str) -> httpx.AsyncBaseTransport:
    return AiohttpTransport() if kind == "aiohttp" else httpx.AsyncHTTPTransport()


# -- item 7: door addresses --------------------------------------------------------------


@pytest.mark.parametrize("inner", ["aiohttp", "httpx"])
async def test_call_to_a_member_whose_door_is_gone_shows_the_agent_no_door_address(
        inner: str) -> None:
    with gone_door() as port:
        records: list[dict[str, Any]] = []
        trace = TraceBus()
        trace.add_sink(records.append)
        transport = formation_transport(
            tokens={"coder": CODER_TOKEN}, doors=Doors({"coder": f"http://127.0.0.1:{port}"}),
            allow=["localhost"], trace=trace, spans={}.get,
            make_inner=lambda: inner_of(inner))
        seen: dict[str, BaseException] = {}

        async def run(task: TaskContext) -> str:
            try:
                await task.http.get(f"{CODER}/.well-known/agent-card.json")
            except httpx.HTTPError as exc:
                seen["http"] = exc
            try:
                await task.call_member("coder", "write a parser")
            except CallFailed as exc:
                seen["call"] = exc
                raise
            return "unreachable: the call cannot succeed"

        def calls_for(run: TaskRun) -> MemberCalls:
            return task_calls(transport, trace=trace, task_id=run.id, span=None,
                              peers=("coder",),
                              trust=run.caller.trust, deadline=time.monotonic() + 20)

        agent = python_agent(run, AgentEnvironment(member="entry"), calls_factory=calls_for)
        door = build_door(agent, DoorSettings(card=card_info(member="entry")), trace=trace)
        try:
            async with client_for(door.app) as client:
                answer = await rpc(client, "SendMessage", {"message": {
                    "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}})
        finally:
            await transport.aclose()

    call, http = seen["call"], seen["http"]
    assert isinstance(call, CallFailed)
    assert (call.member, call.state) == ("coder", "transport error")
    assert isinstance(http, httpx.ConnectError)
    assert str(http.request.url) == f"{CODER}/.well-known/agent-card.json"
    if inner == "aiohttp":   # aiohttp's text names the address: now the virtual one
        assert "coder.formation.invalid" in call.detail and "coder.formation.invalid" in str(http)
    assert_names_no_door(exception_texts(call) + [call.detail] + exception_texts(http), port)
    # What the entry member's caller reads: the failed task and its message.
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "call to member 'coder' failed: transport error" in json.dumps(task)
    assert_names_no_door([json.dumps(answer)], port)
    # The trace: one member_call per request, each naming the virtual address.
    calls = [(r["callee"], r["url"], r.get("via")) for r in records
             if r["event"] == "member_call"]
    assert calls == [("coder", f"{CODER}/.well-known/agent-card.json", "http"),
                     ("coder", CODER, None)]
    assert_names_no_door([json.dumps(records)], port)


@pytest.mark.parametrize("text,scrubbed", [
    ("Cannot connect to host 127.0.0.1:4201 ssl:default [Connect call failed "
     "('127.0.0.1', 4201)]", f"Cannot connect to host {CODER} ssl:default "
     f"[Connect call failed ({CODER})]"),
    ("GET http://127.0.0.1:4201/x failed", f"GET {CODER}/x failed"),
    ("HTTP://LOCALHOST:4201 or localhost:4201", f"{CODER} or {CODER}"),
    ("[::1]:4201, ::1:4201 and ('::1', 4201, 0, 0)", f"{CODER}, {CODER} and ({CODER})"),
    ("127.0.0.1:4202/ then 127.0.0.3:4202", "http://reviewer.formation.invalid/ then "
     "http://reviewer.formation.invalid"),
    # Not a known door: left as it is.
    ("127.0.0.1:42010, 127.0.0.1:420, 10.1.2.3:4201 and ('127.0.0.1', 42011)",
     "127.0.0.1:42010, 127.0.0.1:420, 10.1.2.3:4201 and ('127.0.0.1', 42011)"),
])
async def test_every_spelling_of_a_known_door_address_is_rewritten_and_nothing_else(
        text: str, scrubbed: str) -> None:
    transport = FormationTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        tokens={"coder": CODER_TOKEN, "reviewer": CODER_TOKEN.replace("Y29", "cmV")},
        doors=Doors({"coder": "http://127.0.0.1:4201", "reviewer": "http://127.0.0.3:4202"}),
        allow=["localhost"])
    assert transport.scrub(text) == text                 # no door used yet: none known
    async with FormationClient(transport=transport) as client:
        for member in ("coder", "reviewer"):
            await client.get(f"http://{member}.formation.invalid/")
    assert transport.scrub(text) == scrubbed


class _Failing(httpx.AsyncBaseTransport):
    """An inner transport whose failure quotes the door it was sending to, as aiohttp's
    do: before sending (``when="send"``, a bug: not an httpx exception) or while the
    body is read (``when="body"``)."""

    def __init__(self, when: str) -> None:
        self.when = when

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        netloc = request.url.netloc.decode()
        host, port = netloc.rsplit(":", 1)
        if self.when == "send":
            raise RuntimeError(f"pool broken for {request.url} ('{host}', {port})")

        class Broken(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                yield b'{"jsonrpc"'
                raise httpx.ReadError(f"connection to {netloc} lost")

        return httpx.Response(200, stream=Broken(), request=request)


@pytest.mark.parametrize("when", ["send", "body"])
async def test_inner_failure_quoting_the_door_address_shows_it_to_no_agent(when: str) -> None:
    port = 4999
    transport = FormationTransport(
        _Failing(when), tokens={"coder": CODER_TOKEN},
        doors=Doors({"coder": f"http://127.0.0.1:{port}"}), allow=["localhost"])
    calls = MemberCalls(transport, peers=["coder"], trust=None)
    with pytest.raises(httpx.TransportError) as http:
        await calls.http.get(f"{CODER}/")
    with pytest.raises(CallFailed) as call:
        await calls.call_member("coder", "x")
    await calls.aclose()
    assert str(http.value.request.url) == f"{CODER}/"
    assert CODER in str(http.value) and CODER in call.value.detail
    assert call.value.state == "transport error"
    assert_names_no_door(exception_texts(http.value) + exception_texts(call.value), port)
    assert "mft1" not in str(http.value) + str(call.value)


async def test_task_http_response_hands_the_agent_no_socket_naming_the_door() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hello"})

    async with serve(app) as url:
        async with httpx.AsyncClient() as plain:      # the check below can fail
            assert "network_stream" in (await plain.get(url)).extensions
        transport = FormationTransport(httpx.AsyncHTTPTransport(),
                                       tokens={"coder": CODER_TOKEN},
                                       doors=Doors({"coder": url}), allow=["localhost"])
        async with transport, FormationClient(transport=transport) as client:
            response = await client.get(f"{CODER}/")
    assert response.text == "hello"
    assert "network_stream" not in response.extensions
    assert str(response.url) == f"{CODER}/"


# -- item 9: JWT subjects ----------------------------------------------------------------

STRANGER = DeclaredBearer(name="stranger", token="stranger-token-0123456789abcdef")


def corp_token(**claims: Any) -> str:
    """A token of the issuer ``jwt_issuer()`` declares; ``sub=None`` leaves it out."""
    payload = {"iss": "https://id.example", "aud": "coder", "exp": int(time.time()) + 300,
               **claims}
    payload = {key: value for key, value in payload.items() if value is not None}
    return jwt.encode(payload, JWT_KEY, algorithm="EdDSA", headers={"kid": "k1"})


async def asks_which_language(run: TaskRun) -> str:
    answer = await run.input_required("which language?")
    return f"written in {message_text(answer)}"


def corp_door(scopes: tuple[str, ...] | None = None) -> Door:
    policy = AuthPolicy(authenticated=True, bearers=(STRANGER,),
                        jwt_issuers=(jwt_issuer(scopes=scopes),))
    return build_door(asks_which_language, DoorSettings(
        card=card_info(), gate=GateConfig(concurrency=4, queue_depth=4)), policy=policy)


def client_with(door: Door, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app), base_url=BASE_URL,
                             headers={**A2A_HEADERS, "Authorization": f"Bearer {token}"},
                             timeout=10)


async def call(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> bytes:
    """The raw bytes of one JSON-RPC answer (always the same request id)."""
    response = await client.post("/", json={"jsonrpc": "2.0", "id": 7, "method": method,
                                            "params": params})
    assert response.status_code == 200, response.text
    return response.content


def follow_up(task_id: str, text: str) -> dict[str, Any]:
    return {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "taskId": task_id,
                        "parts": [{"text": text}]}}


async def test_second_subject_of_one_jwt_issuer_cannot_reach_the_first_subjects_task() -> None:
    door = corp_door()
    async with client_with(door, corp_token(sub="alice")) as alice, \
            client_with(door, corp_token(sub="bob")) as bob, \
            client_with(door, STRANGER.token) as stranger:
        started = json.loads(await call(alice, "SendMessage", {"message": {
            "messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "write a parser"}]}}))
        task_id = started["result"]["task"]["id"]
        assert started["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

        attacks = [("GetTask", {"id": task_id}), ("SubscribeToTask", {"id": task_id}),
                   ("CancelTask", {"id": task_id}), ("SendMessage", follow_up(task_id, "go"))]
        unknown = await call(bob, "GetTask", {"id": "no-such-task"})
        assert json.loads(unknown)["error"]["code"] == -32001
        for method, params in attacks:
            by_bob = await call(bob, method, params)
            assert by_bob == await call(stranger, method, params), method
            assert by_bob == unknown, method
        listed_by_bob = await call(bob, "ListTasks", {})
        assert listed_by_bob == await call(stranger, "ListTasks", {})
        assert json.loads(listed_by_bob)["result"]["tasks"] == []

        # Alice still reaches her task, untouched by bob's CancelTask and follow-up.
        own = json.loads(await call(alice, "GetTask", {"id": task_id}))["result"]
        assert own["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        listed = json.loads(await call(alice, "ListTasks", {}))["result"]["tasks"]
        assert [task["id"] for task in listed] == [task_id]
        following = asyncio.create_task(call(alice, "SubscribeToTask", {"id": task_id}))
        await asyncio.sleep(0.05)          # let the subscription start before the answer
        async with asyncio.timeout(10):
            answered = json.loads(await call(alice, "SendMessage", follow_up(task_id, "rust")))
            stream = (await following).decode()
    final = answered["result"]["task"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert final["artifacts"][-1]["parts"] == [{"text": "written in rust"}]
    assert "TASK_STATE_COMPLETED" in stream and "-32001" not in stream


@pytest.mark.parametrize("sub", [None, "", "x" * 256, 42],
                         ids=["absent", "empty", "256 characters", "a number"])
async def test_jwt_without_a_usable_sub_is_refused_as_invalid_token(sub: Any) -> None:
    door = corp_door()
    async with client_with(door, corp_token(sub=sub)) as client:
        response = await client.post("/", json={"jsonrpc": "2.0", "id": 1,
                                                "method": "ListTasks", "params": {}})
    assert_invalid_token(response)
    async with client_with(door, corp_token(sub="y" * 255)) as longest:
        assert (await longest.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                                              "params": {}})).status_code == 200


async def test_scope_refusal_names_the_issuer_never_the_subject() -> None:
    door = corp_door(scopes=("GetTask",))
    async with client_with(door, corp_token(sub="alice-in-accounting")) as alice:
        response = await alice.post("/", json={"jsonrpc": "2.0", "id": 1,
                                               "method": "SendMessage", "params": {}})
    assert response.status_code == 403
    assert response.json() == {"error": "insufficient_scope",
                               "message": "The credential jwt:corp may not call SendMessage."}
