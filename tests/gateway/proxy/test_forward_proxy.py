"""ForwardProxy (docs/proxy.md, "The forward proxy"): the member's HTTP proxy for agents in
other processes.

A formation where this member ("planner") may call "coder" (a real DoorAuth door that
verifies formation tokens), "streamer" (an SSE app), "ghost" (a door nobody listens on)
and "late" (whose door URL never arrives); "entry" is a member it may not call. All of it
is real sockets on 127.0.0.1: uvicorn for the doors and the outside host, a TCP echo
server for tunnels, the proxy itself. Clients are plain ones: httpx with ``proxy=``,
urllib with a ProxyHandler, curl where installed, and a raw socket for what a well-behaved
client never sends. Security tests are named after the attack.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import socket
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.auth.door_auth import AuthPolicy, DoorAuth
from gateway.auth.tokens import FormationVerifier
from gateway.caller import CALLER_SCOPE_KEY
from gateway.proxy.aiohttp_transport import default_inner_transport
from gateway.proxy.env import PROXY_VARIABLES, proxy_environment
from gateway.proxy.formation import FormationRefused, FormationTransport
from gateway.proxy.forward import PROXY_AUTHENTICATE, ForwardProxy, ProxyLimits
from gateway.proxy.forward_request import ForwardAnswer, parse_head, read_head
from tests.support.auth import FORMATION, KEY, mint
from tests.support.proxy_fakes import Doors

#: What the rig's call hook (the member runtime's, in a member) gives each call.
CALL_TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

CODER_TOKEN = mint("planner", "coder")
STREAMER_TOKEN = mint("planner", "streamer")
GHOST_TOKEN = mint("planner", "ghost")
LATE_TOKEN = mint("planner", "late")
ENTRY_TOKEN = mint("planner", "entry")          # never given to the proxy
TOKENS = {"coder": CODER_TOKEN, "streamer": STREAMER_TOKEN, "ghost": GHOST_TOKEN,
          "late": LATE_TOKEN}
ALL_TOKENS = (*TOKENS.values(), ENTRY_TOKEN)
#: An address nothing on this machine answers (TEST-NET-3); only refusals are sent to it.
FAR_HOST = "203.0.113.9"
STEP = 5.0                                       # the bound on any one wait in these tests


# -- servers ---------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def serve(*apps: Any) -> AsyncIterator[list[str]]:
    """Each app on a port of its own at 127.0.0.1, all from one uvicorn server (one
    shutdown instead of several); yields their base URLs, in order."""
    sockets = []
    for _ in apps:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    by_port = {sock.getsockname()[1]: app for sock, app in zip(sockets, apps, strict=True)}

    async def dispatch(scope: Any, receive: Any, send: Any) -> None:
        await by_port[scope["server"][1]](scope, receive, send)

    config = uvicorn.Config(dispatch, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=sockets))
    try:
        async with asyncio.timeout(STEP):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield [f"http://127.0.0.1:{port}" for port in by_port]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        for sock in sockets:
            sock.close()


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _answer(send: Any, status: int, body: bytes,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = headers or [(b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]


@dataclass
class Recorder:
    """An ASGI app that remembers what reached it. In front of DoorAuth it sees the
    wire as the door does; behind it, what the door let through."""

    app: Any = None
    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1"))
                   for k, v in scope["headers"]]
        if self.app is not None:
            self.seen.append(Seen(scope["method"], scope["path"], headers, b""))
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        self.seen.append(Seen(scope["method"], scope["path"], headers, body))
        await _outside_answer(scope, send, body)


async def _outside_answer(scope: Any, send: Any, body: bytes) -> None:
    """The outside host's routes."""
    path = scope["path"]
    if path == "/to-virtual":
        await _answer(send, 307, b"", [(b"location", b"http://coder.formation.invalid/")])
    elif path == "/to-here":
        await _answer(send, 302, b"", [(b"location", b"/landed")])
    elif path == "/hop":
        await _answer(send, 200, b"hop", [
            (b"connection", b"x-hop-secret"), (b"x-hop-secret", b"1"),
            (b"keep-alive", b"timeout=5"), (b"proxy-authenticate", b"Basic realm=x"),
            (b"proxy-x", b"1"), (b"x-kept", b"yes"), (b"content-type", b"text/plain")])
    elif path == "/stream":                         # no Content-Length: chunked by uvicorn
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await _answer(send, 200, json.dumps({"path": path, "body": body.decode()}).encode())


async def door_app(scope: Any, receive: Any, send: Any) -> None:
    """What stands behind DoorAuth at coder's door: answers with who called, never with
    the headers it got (the agent must see no token, so nothing may reflect one)."""
    if scope["type"] != "http":
        return
    await _body(receive)
    caller = scope[CALLER_SCOPE_KEY]
    await _answer(send, 200, json.dumps({
        "kind": caller.credential.kind, "member": caller.credential.member,
        "origin": caller.origin, "trust": caller.trust}).encode())


class Streamer:
    """An SSE door: the first event, then the second only when the test says so."""

    def __init__(self) -> None:
        self.first_sent = asyncio.Event()
        self.release = asyncio.Event()
        self.second_sent = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        self.first_sent.set()
        await asyncio.wait_for(self.release.wait(), STEP)
        self.second_sent = True
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that sends back what it gets, then half-closes."""
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the formation around the proxy ----------------------------------------------------

class Counting(httpx.AsyncBaseTransport):
    """The network under FormationTransport: every request it was handed opens (or
    reuses) a connection, so a refusal must leave this empty."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(str(request.url))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Rig:
    proxy: ForwardProxy
    net: Counting
    doors: Doors
    door: Recorder                  # in front of coder's DoorAuth
    outside: Recorder               # an allowed real host
    outside_url: str
    streamer: Streamer
    calls: list[tuple[str, str]]
    trust: list[str]

    @property
    def secret(self) -> str:
        password = httpx.URL(self.proxy.url).password
        assert password
        return password

    @property
    def auth(self) -> bytes:
        return b"Basic " + base64.b64encode(f"murmur:{self.secret}".encode())

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(proxy=self.proxy.url, trust_env=False, timeout=STEP,
                                 **kwargs)

    def assert_nothing_sent(self) -> None:
        assert self.net.sent == []
        assert self.doors.lookups == []
        assert self.calls == []

    def assert_clean(self, text: str | bytes) -> None:
        """No formation token and no proxy secret in what an agent or a log sees."""
        if isinstance(text, bytes):
            text = text.decode("latin-1")
        for token in ALL_TOKENS:
            assert token not in text
            assert token.split(".")[2] not in text          # not even the signature
        assert self.secret not in text


RigFactory = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def make_rig() -> AsyncIterator[RigFactory]:
    async with contextlib.AsyncExitStack() as stack:
        async def build(*, allow: list[str] | None = None,
                        limits: ProxyLimits | None = None) -> Rig:
            policy = AuthPolicy(authenticated=True, member="coder", accept_peer_tasks=True,
                                verifier=FormationVerifier(KEY.public_bytes, FORMATION))
            door = Recorder(DoorAuth(door_app, policy))
            streamer = Streamer()
            outside = Recorder()
            coder_url, streamer_url, outside_url = await stack.enter_async_context(
                serve(door, streamer, outside))
            doors = Doors({"coder": coder_url, "streamer": streamer_url,
                           "ghost": f"http://127.0.0.1:{closed_port()}",
                           "entry": "http://127.0.0.1:1"})
            net = Counting(default_inner_transport())
            calls: list[tuple[str, str]] = []
            trust = ["untrusted"]
            transport = FormationTransport(
                net, tokens=TOKENS, doors=doors,
                allow=["localhost"] if allow is None else allow,
                on_call=lambda callee, url: calls.append((callee, url)) or CALL_TRACEPARENT,
                door_wait=0.3)
            stack.push_async_callback(transport.aclose)
            proxy = ForwardProxy(transport, trust=lambda: trust[0], limits=limits)
            await proxy.start()
            stack.push_async_callback(proxy.close)
            return Rig(proxy, net, doors, door, outside, outside_url, streamer, calls, trust)

        yield build


@pytest.fixture
async def rig(make_rig: RigFactory) -> Rig:
    return await make_rig()


# -- raw exchanges ---------------------------------------------------------------------

@dataclass
class Raw:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    data: bytes

    def header(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]

    @property
    def content(self) -> bytes:
        """The body without its chunked framing, when it has one."""
        if self.header("transfer-encoding") != ["chunked"]:
            return self.body
        content, rest = b"", self.body
        while True:
            size_text, _, rest = rest.partition(b"\r\n")
            size = int(size_text, 16)
            if size == 0:
                return content
            content, rest = content + rest[:size], rest[size + 2:]

    def json(self) -> Any:
        return json.loads(self.content)


def parse_answer(data: bytes) -> Raw:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [(name.strip().lower(), value.strip())
               for name, _, value in (line.partition(":") for line in lines[1:])]
    return Raw(int(lines[0].split(" ")[1]), headers, body, data)


async def exchange(rig: Rig, data: bytes, *, close_after: bool = False) -> Raw:
    """Send ``data`` on a fresh connection and read until the proxy closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    try:
        writer.write(data)
        if close_after:
            writer.write_eof()
        async with asyncio.timeout(STEP):
            answer = await reader.read(-1)
    finally:
        writer.close()
    return parse_answer(answer)


def request(rig: Rig, target: str, *, host: str | None = None, method: str = "GET",
            extra: str = "", auth: bool = True, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    if auth:
        lines.append(f"Proxy-Authorization: {rig.auth.decode()}")
    if body:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    head = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    return head.encode("latin-1") + body


def rpc_body() -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                       "params": {"id": "t1"}}).encode()


A2A = {"A2A-Version": "1.0"}


# -- the agent's environment -------------------------------------------------------------

def test_environment_names_the_proxy_five_times_and_drops_every_exemption() -> None:
    env = {"PATH": "/bin", "NO_PROXY": "coder.formation.invalid", "no_proxy": "*",
           "No_Proxy": "*", "ALL_PROXY": "socks5://evil:1080", "Http_Proxy": "http://evil",
           "HTTP_PROXY": "http://evil:3128", "KEEP": "yes"}
    url = "http://murmur:s3cret@127.0.0.1:4000"
    out = proxy_environment(env, url)
    assert out == {"PATH": "/bin", "KEEP": "yes", **dict.fromkeys(PROXY_VARIABLES, url)}
    assert set(PROXY_VARIABLES) == {"HTTP_PROXY", "http_proxy", "HTTPS_PROXY",
                                    "https_proxy", "MURMUR_PROXY"}
    assert env["NO_PROXY"] == "coder.formation.invalid"          # the input is untouched


async def test_each_session_gets_its_own_secret_and_no_repr_shows_it(rig: Rig) -> None:
    url = httpx.URL(rig.proxy.url)
    assert (url.scheme, url.username, url.host, url.port) == (
        "http", "murmur", "127.0.0.1", rig.proxy.port)
    assert len(rig.secret) >= 32
    other = ForwardProxy(FormationTransport(httpx.MockTransport(lambda r: httpx.Response(200)),
                                            tokens={}, doors=Doors({}), allow=[]),
                         trust=lambda: "untrusted")
    await other.start()
    try:
        assert httpx.URL(other.url).password != rig.secret
        assert rig.secret not in repr(rig.proxy)
        env = rig.proxy.environment({"NO_PROXY": "*"})
        assert env == dict.fromkeys(PROXY_VARIABLES, rig.proxy.url)
    finally:
        await other.close()


# -- 407: the proxy opens only with its secret -----------------------------------------

async def test_using_the_proxy_without_its_secret_gets_407(rig: Rig) -> None:
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x", auth=False))
    assert answer.status == 407
    assert answer.header("proxy-authenticate") == [PROXY_AUTHENTICATE]
    assert answer.json()["error"] == "proxy_auth_required"
    no_secret = rig.proxy.url.replace(f"murmur:{rig.secret}@", "")
    async with httpx.AsyncClient(proxy=no_secret, trust_env=False, timeout=STEP) as client:
        response = await client.get(f"{rig.outside_url}/x")
    assert response.status_code == 407
    assert rig.outside.seen == [] and rig.net.sent == []
    rig.assert_clean(answer.data)


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


MANGLED: dict[str, Callable[[str], str]] = {
    "a wrong secret": lambda secret: basic("murmur:wrong-secret"),
    "no secret": lambda secret: basic("murmur:"),
    "another user": lambda secret: basic(f"root:{secret}"),
    "no user": lambda secret: basic(secret),
    "a longer secret": lambda secret: basic(f"murmur:{secret}x"),
    "a prefix of the secret": lambda secret: basic(f"murmur:{secret[:-1]}"),
    "trailing garbage": lambda secret: basic(f"murmur:{secret}") + "!!",
    "the bearer scheme": lambda secret: f"Bearer {secret}",
    "the bare secret": lambda secret: secret,
    "no credentials": lambda secret: "Basic",
}


@pytest.mark.parametrize("mangle", MANGLED.values(), ids=MANGLED.keys())
async def test_guessing_or_mangling_the_secret_gets_407(
        rig: Rig, mangle: Callable[[str], str]) -> None:
    header = mangle(rig.secret)
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x", auth=False,
                                         extra=f"Proxy-Authorization: {header}\r\n"))
    assert answer.status == 407
    assert answer.header("proxy-authenticate") == [PROXY_AUTHENTICATE]
    assert rig.outside.seen == [] and rig.net.sent == []
    rig.assert_clean(answer.data)


async def test_a_second_proxy_authorization_header_is_not_a_second_guess(rig: Rig) -> None:
    wrong = "Basic " + base64.b64encode(b"murmur:nope").decode()
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x",
                                         extra=f"Proxy-Authorization: {wrong}\r\n"))
    assert answer.status == 407
    assert rig.outside.seen == []


# -- virtual addresses: the five steps of FormationTransport ---------------------------

async def test_a_virtual_address_reaches_the_callee_door_with_the_token_the_agent_never_sees(
        rig: Rig) -> None:
    async with rig.client(headers=A2A) as client:
        response = await client.post("http://coder.formation.invalid/", content=rpc_body())
    assert response.status_code == 200
    assert response.json() == {"kind": "member", "member": "planner", "origin": "peer",
                               "trust": "untrusted"}
    [seen] = rig.door.seen                          # the wire at coder's door
    assert seen.values("authorization") == [f"Bearer {CODER_TOKEN}"]
    assert seen.values("x-murmur-task-origin") == ["peer"]
    assert seen.values("proxy-authorization") == []
    assert rig.calls == [("coder", "http://coder.formation.invalid/")]   # the member_call hook
    rig.assert_clean(response.text)
    rig.assert_clean(json.dumps(list(response.headers.multi_items())))


async def test_an_agent_claiming_trust_or_a_token_of_its_own_gets_neither(rig: Rig) -> None:
    extra = ("Authorization: Bearer forged\r\nx-murmur-task-trust: trusted\r\n"
             "x_murmur_task_origin: operator\r\nA2A-Version: 1.0\r\n")
    answer = await exchange(rig, request(rig, "http://coder.formation.invalid/",
                                         method="POST", host="coder.formation.invalid",
                                         extra=extra, body=rpc_body()))
    assert answer.status == 200
    assert answer.json()["trust"] == "untrusted"
    [seen] = rig.door.seen
    assert seen.values("authorization") == [f"Bearer {CODER_TOKEN}"]
    assert seen.values("x-murmur-task-trust") == ["untrusted"]
    assert seen.values("x-murmur-task-origin") == ["peer"]
    rig.assert_clean(answer.data)


async def test_an_agent_forging_its_calls_trace_context_gets_the_runtimes(rig: Rig) -> None:
    # The runtime's hook gives each call its span; an agent's own traceparent would
    # graft the call onto a trace of its choosing, or hide it from its task's tree.
    extra = ("traceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n"
             "tracestate: forged=1\r\nA2A-Version: 1.0\r\n")
    answer = await exchange(rig, request(rig, "http://coder.formation.invalid/",
                                         method="POST", host="coder.formation.invalid",
                                         extra=extra, body=rpc_body()))
    assert answer.status == 200
    [seen] = rig.door.seen
    assert seen.values("traceparent") == [CALL_TRACEPARENT.decode()]
    assert seen.values("tracestate") == []


async def test_trust_is_stamped_trusted_only_while_the_member_says_so(rig: Rig) -> None:
    async with rig.client(headers=A2A) as client:
        answers = []
        for trust in ("trusted", "untrusted", "trusted"):
            rig.trust[0] = trust
            answers.append((await client.post("http://coder.formation.invalid/",
                                              content=rpc_body())).json()["trust"])
    assert answers == ["trusted", "untrusted", "trusted"]
    assert [seen.values("x-murmur-task-trust") for seen in rig.door.seen] == [
        ["trusted"], ["untrusted"], ["trusted"]]


REFUSED_TARGETS = [
    "http://entry.formation.invalid/",              # a member it may not call
    "http://planner.formation.invalid/",            # itself
    "http://nobody.formation.invalid/",             # no such member
    "http://CODER.formation.invalid/",              # upper case
    "http://Coder.Formation.Invalid/",
    "http://coder.formation.invalid:80/",           # with a port, even the default one
    "http://coder.formation.invalid:8080/",
    "http://coder.formation.invalid./",             # trailing dot
    "http://x@coder.formation.invalid/",            # userinfo
    "http://coder.formation.invalid.evil.example/",
    "http://c%6Fder.formation.invalid/",
    "https://coder.formation.invalid/",             # virtual addresses are http only
    "//coder.formation.invalid/",
]


@pytest.mark.parametrize("target", REFUSED_TARGETS)
async def test_reaching_a_member_by_a_spelling_of_its_address_is_refused_before_connecting(
        rig: Rig, target: str) -> None:
    host = target.split("//", 1)[1].split("/", 1)[0]
    answer = await exchange(rig, request(rig, target, host=host))
    assert answer.status == 403
    assert answer.json() == {"error": "formation_refused", "message": FormationRefused.MESSAGE}
    rig.assert_nothing_sent()
    assert rig.door.seen == []


async def test_a_real_url_with_a_virtual_host_header_is_not_a_call_to_the_member(
        rig: Rig) -> None:
    # The target decides (RFC 9112 s. 3.2.2): the Host header is replaced, so this is a
    # plain request to the outside host, with no token.
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x",
                                         host="coder.formation.invalid"))
    assert answer.status == 200
    [seen] = rig.outside.seen
    assert seen.values("host") == [rig.outside_url.removeprefix("http://")]
    assert seen.values("authorization") == []
    assert rig.calls == []


async def test_tunnelling_to_a_virtual_address_is_formation_refused(rig: Rig) -> None:
    for target in ("coder.formation.invalid:80", "coder.formation.invalid:443",
                   "CODER.FORMATION.INVALID:443"):
        answer = await exchange(rig, request(rig, target, method="CONNECT", host=target))
        assert answer.status == 403
        assert answer.json() == {"error": "formation_refused",
                                 "message": FormationRefused.MESSAGE}
    rig.assert_nothing_sent()


async def test_an_unreachable_callee_is_502_naming_the_member_never_its_address(
        rig: Rig) -> None:
    ghost_port = str(httpx.URL(rig.doors.urls["ghost"]).port)
    async with rig.client() as client:
        ghost = await client.post("http://ghost.formation.invalid/", content=rpc_body())
        late = await client.post("http://late.formation.invalid/", content=rpc_body())
    for response, member in ((ghost, "ghost"), (late, "late")):
        assert response.status_code == 502
        body = response.json()
        assert body["error"] == "door_unavailable"
        # ghost's door does not answer; late's address never arrived.
        said = "the door of" if member == "ghost" else "the door address of"
        assert body["message"].startswith(f"{said} member {member!r} "), body
        assert "127.0.0.1" not in response.text and ghost_port not in response.text
        rig.assert_clean(response.text)
    assert rig.doors.lookups == ["ghost", "late"]


# -- egress: the allow-list, and never a token -----------------------------------------

async def test_egress_outside_the_allow_list_is_403_before_connecting(rig: Rig) -> None:
    for target in (f"http://{FAR_HOST}/", f"http://{FAR_HOST}:8080/x",
                   "http://api.example.com/v1"):
        answer = await exchange(rig, request(rig, target))
        assert answer.status == 403
        body = answer.json()
        assert body["error"] == "egress_refused"
        assert "capabilities.network.allow" in body["message"]
    rig.assert_nothing_sent()


async def test_egress_to_an_allowed_host_loses_proxy_and_hop_headers_and_gets_no_token(
        rig: Rig) -> None:
    extra = ("Connection: close, X-Hop\r\nX-Hop: drop me\r\nProxy-Connection: keep-alive\r\n"
             "Proxy-Extra: 1\r\nTE: trailers\r\nUpgrade: h2c\r\nKeep-Alive: 5\r\n"
             "x-murmur-task-trust: trusted\r\nAuthorization: Bearer agent-own-key\r\n"
             "X-Kept: yes\r\n")
    data = request(rig, f"{rig.outside_url}/x?q=1", host="ignored.example", extra=extra)
    answer = await exchange(rig, data.replace(b"Connection: close\r\n", b"", 1))
    assert answer.status == 200
    assert answer.json() == {"path": "/x", "body": ""}
    [seen] = rig.outside.seen
    names = {name for name, _ in seen.headers}
    assert not names & {"x-hop", "proxy-connection", "proxy-extra", "proxy-authorization",
                        "te", "upgrade", "keep-alive", "x-murmur-task-trust"}
    assert seen.values("x-kept") == ["yes"]
    assert seen.values("authorization") == ["Bearer agent-own-key"]   # the agent's own
    assert rig.calls == []
    rig.assert_clean(json.dumps(seen.headers))


async def test_an_answers_hop_by_hop_and_proxy_headers_stop_at_the_proxy(rig: Rig) -> None:
    async with rig.client() as client:
        response = await client.get(f"{rig.outside_url}/hop")
    assert response.status_code == 200 and response.text == "hop"
    assert response.headers["x-kept"] == "yes"
    for name in ("x-hop-secret", "keep-alive", "proxy-authenticate", "proxy-x"):
        assert name not in response.headers


async def test_a_redirect_to_a_virtual_address_cannot_be_followed_with_the_token(
        rig: Rig) -> None:
    # The confused deputy: an outside host steering the agent's client, which follows
    # redirects, to a member. The proxy cannot tell the follow-up from a fresh request,
    # so the Location never reaches the agent.
    async with rig.client(follow_redirects=True) as client:
        response = await client.get(f"{rig.outside_url}/to-virtual")
        relative = await client.get(f"{rig.outside_url}/to-here")
    assert response.status_code == 307
    assert "location" not in response.headers
    assert rig.door.seen == [] and rig.calls == []
    assert relative.status_code == 200                  # an ordinary redirect still works
    assert relative.json()["path"] == "/landed"


# -- CONNECT tunnels ------------------------------------------------------------------

async def test_connect_through_the_allow_list_tunnels_bytes_both_ways(rig: Rig) -> None:
    async with echo_server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
        try:
            writer.write(request(rig, f"127.0.0.1:{port}", method="CONNECT",
                                 host=f"127.0.0.1:{port}").replace(b"Connection: close\r\n",
                                                                    b""))
            async with asyncio.timeout(STEP):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 ")
                writer.write(b"\x16\x03\x01 hello through the tunnel")
                assert await reader.readexactly(28) == b"\x16\x03\x01 hello through the tunnel"
                writer.write_eof()                      # the half-close reaches the server
                assert await reader.read(-1) == b""
        finally:
            writer.close()
    assert rig.net.sent == []                           # a tunnel is not a proxied request


async def test_connect_outside_the_allow_list_is_refused(make_rig: RigFactory) -> None:
    async with echo_server() as port:
        rig = await make_rig(allow=[f"127.0.0.1:{port + 1 if port < 65535 else port - 1}"])
        for target in (f"127.0.0.1:{port}", f"{FAR_HOST}:443", f"localhost:{port}",
                       f"[::1]:{port}"):
            answer = await exchange(rig, request(rig, target, method="CONNECT", host=target))
            assert answer.status == 403, target
            assert answer.json()["error"] == "egress_refused"


@pytest.mark.parametrize("target", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999",
                                    "user@127.0.0.1:443", "http://127.0.0.1:443/"])
async def test_connect_without_a_plain_host_and_port_is_400(rig: Rig, target: str) -> None:
    answer = await exchange(rig, request(rig, target, method="CONNECT"))
    assert answer.status == 400


# -- streaming -------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["virtual", "outside"])
async def test_server_sent_events_arrive_one_by_one(make_rig: RigFactory, where: str) -> None:
    rig = await make_rig()
    streamer = rig.streamer
    url = "http://streamer.formation.invalid/events"
    if where == "outside":
        url = f"{rig.doors.urls['streamer']}/events"    # the same app as a real host
    async with rig.client() as client, client.stream("GET", url) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        async with asyncio.timeout(STEP):
            first = await anext(lines)
        assert first == "data: one"
        assert not streamer.second_sent                 # it came before the second existed
        streamer.release.set()
        async with asyncio.timeout(STEP):
            rest = [line async for line in lines]
    assert rest == ["", "data: two", ""]


async def test_chunked_and_sized_answers_keep_their_framing(rig: Rig) -> None:
    chunked = await exchange(rig, request(rig, f"{rig.outside_url}/stream"))
    assert chunked.header("transfer-encoding") == ["chunked"]
    assert chunked.header("content-length") == []
    assert chunked.body.endswith(b"\r\n0\r\n\r\n")
    assert chunked.content == b"one two three"
    sized = await exchange(rig, request(rig, f"{rig.outside_url}/x"))
    assert sized.header("content-length") == [str(len(sized.body))]
    assert sized.header("transfer-encoding") == []
    head = await exchange(rig, request(rig, f"{rig.outside_url}/x", method="HEAD"))
    assert head.status == 200 and head.body == b""


async def test_one_connection_carries_several_requests(rig: Rig) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    try:
        for path in ("/a", "/b"):
            writer.write(request(rig, f"{rig.outside_url}{path}")
                         .replace(b"Connection: close\r\n", b""))
            async with asyncio.timeout(STEP):
                head = parse_answer(await reader.readuntil(b"\r\n\r\n"))
                body = await reader.readexactly(int(head.header("content-length")[0]))
            assert json.loads(body)["path"] == path
    finally:
        writer.close()


async def test_a_chunked_request_body_is_forwarded_whole(rig: Rig) -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: dropped\r\n\r\n"
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/up", method="POST",
                                         extra="Transfer-Encoding: chunked\r\n") + body)
    assert answer.status == 200
    assert answer.json() == {"path": "/up", "body": "hello world"}
    [seen] = rig.outside.seen
    assert seen.values("content-length") == ["11"]


async def test_expect_100_continue_is_answered_by_the_proxy(rig: Rig) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    try:
        writer.write(request(rig, f"{rig.outside_url}/up", method="POST",
                             extra="Content-Length: 2\r\nExpect: 100-continue\r\n"))
        async with asyncio.timeout(STEP):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            answer = parse_answer(await reader.read(-1))
    finally:
        writer.close()
    assert answer.json()["body"] == "ok"
    assert rig.outside.seen[0].values("expect") == []


# -- plain clients -----------------------------------------------------------------------

async def test_urllib_with_a_proxy_handler_reaches_a_member_and_the_outside(rig: Rig) -> None:
    def fetch(url: str, data: bytes | None = None) -> tuple[int, bytes]:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": rig.proxy.url}))
        sent = urllib.request.Request(url, data=data, headers=A2A)  # noqa: S310 - http
        with opener.open(sent, timeout=STEP) as response:
            return response.status, response.read()

    status, body = await asyncio.to_thread(fetch, "http://coder.formation.invalid/",
                                           rpc_body())
    assert status == 200 and json.loads(body)["member"] == "planner"
    status, body = await asyncio.to_thread(fetch, f"{rig.outside_url}/from-urllib")
    assert status == 200 and json.loads(body)["path"] == "/from-urllib"
    rig.assert_clean(body)


async def test_curl_with_the_agents_environment_reaches_a_member(rig: Rig) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed on this machine")
    # The secret reaches curl as an agent gets it, in its environment, never in argv.
    env = rig.proxy.environment({"PATH": os.environ.get("PATH", ""), "NO_PROXY": "*"})
    process = await asyncio.create_subprocess_exec(
        curl, "-sS", "--max-time", str(STEP), "-H", "A2A-Version: 1.0",
        "-H", "Content-Type: application/json", "--data-binary", "@-",
        "http://coder.formation.invalid/", env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(STEP * 2):
        out, err = await process.communicate(rpc_body())
    assert process.returncode == 0, err
    assert json.loads(out) == {"kind": "member", "member": "planner", "origin": "peer",
                               "trust": "untrusted"}
    rig.assert_clean(out + err)


# -- malformed and slow requests ---------------------------------------------------------

async def test_a_head_past_64_kib_gets_431(rig: Rig) -> None:
    filler = "X-Fill: " + "a" * 1000 + "\r\n"
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x", extra=filler * 70))
    assert answer.status == 431
    assert rig.net.sent == []


async def test_a_slow_head_is_cut_off(make_rig: RigFactory) -> None:
    rig = await make_rig(limits=ProxyLimits(head_seconds=0.3))
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    started = time.monotonic()
    try:
        writer.write(b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Slow: ")     # never finished
        async with asyncio.timeout(STEP):
            answer = parse_answer(await reader.read(-1))
    finally:
        writer.close()
    assert answer.status == 408
    assert 0.25 < time.monotonic() - started < STEP


async def test_a_slow_body_is_cut_off_and_nothing_is_sent(make_rig: RigFactory) -> None:
    rig = await make_rig(limits=ProxyLimits(body_seconds=0.3))
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    started = time.monotonic()
    try:
        writer.write(request(rig, f"{rig.outside_url}/x", method="POST",
                             extra="Content-Length: 10\r\n") + b"abc")  # 7 bytes short
        async with asyncio.timeout(STEP):
            answer = parse_answer(await reader.read(-1))
    finally:
        writer.close()
    assert answer.status == 408
    assert "body" in answer.json()["message"]
    assert 0.25 < time.monotonic() - started < STEP
    assert rig.net.sent == []


async def test_a_late_head_is_cut_off_while_timely_ones_beside_it_go_on(
        make_rig: RigFactory) -> None:
    """Every read's deadline starts with the read: a kept-alive connection whose heads
    each come in time is served for longer than the deadline, on the same sweep that
    cuts off a late head on another connection."""
    rig = await make_rig(limits=ProxyLimits(head_seconds=0.4))
    slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    kept = request(rig, f"{rig.outside_url}/x").replace(b"Connection: close\r\n", b"")
    statuses = []
    started = time.monotonic()
    try:
        slow_writer.write(b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Slow: ")   # never finished
        async with asyncio.timeout(STEP):
            for _ in range(4):
                writer.write(kept)
                head = parse_answer(await reader.readuntil(b"\r\n\r\n"))
                await reader.readexactly(int(dict(head.headers)["content-length"]))
                statuses.append(head.status)
                await asyncio.sleep(0.2)
            late = parse_answer(await slow_reader.read(-1))
    finally:
        writer.close()
        slow_writer.close()
    assert statuses == [200, 200, 200, 200]
    assert time.monotonic() - started > 0.8              # twice the deadline, and served
    assert late.status == 408


SMUGGLING = {
    "both framings": "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
    "two lengths": "Content-Length: 4\r\nContent-Length: 5\r\n",
    "a signed length": "Content-Length: +4\r\n",
    "a listed coding": "Transfer-Encoding: gzip, chunked\r\n",
    "a space before the colon": "Content-Length : 4\r\n",
    "a folded line": "X-A: 1\r\n  folded\r\n",
    "a bare LF": "X-A: 1\nContent-Length: 4\r\n",
    "a NUL": "X-A: 1\x002\r\n",
}


@pytest.mark.parametrize("extra", SMUGGLING.values(), ids=SMUGGLING.keys())
async def test_smuggling_a_request_by_ambiguous_framing_is_refused(rig: Rig, extra: str) -> None:
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x", method="POST",
                                         extra=extra) + b"abcd")
    assert answer.status in (400, 501)
    assert rig.outside.seen == [] and rig.net.sent == []


@pytest.mark.parametrize("line", [b"GET / HTTP/1.1", b"GET  http://a/ HTTP/1.1",
                                  b"GET http://a/ HTTP/2.0", b"GET http://a/",
                                  b"G@T http://a/ HTTP/1.1", b"OPTIONS * HTTP/1.1"])
async def test_a_request_line_that_is_not_absolute_form_http_is_400(
        rig: Rig, line: bytes) -> None:
    answer = await exchange(rig, line + b"\r\nProxy-Authorization: " + rig.auth + b"\r\n\r\n")
    assert answer.status == 400
    assert rig.net.sent == []


async def test_a_body_past_the_bound_is_413_before_it_is_read(make_rig: RigFactory) -> None:
    rig = await make_rig(limits=ProxyLimits(body_bytes=10))
    answer = await exchange(rig, request(rig, f"{rig.outside_url}/x", method="POST",
                                         body=b"x" * 11))
    assert answer.status == 413
    chunked = await exchange(rig, request(rig, f"{rig.outside_url}/x", method="POST",
                                          extra="Transfer-Encoding: chunked\r\n")
                             + b"b\r\n" + b"x" * 11 + b"\r\n0\r\n\r\n")
    assert chunked.status == 413
    assert rig.outside.seen == []


async def test_flooding_the_proxy_with_connections_stops_at_the_cap(
        make_rig: RigFactory) -> None:
    rig = await make_rig(limits=ProxyLimits(connections=2))
    held = [await asyncio.open_connection("127.0.0.1", rig.proxy.port) for _ in range(2)]
    try:
        await asyncio.sleep(0.05)                         # both are being served
        answer = await exchange(rig, request(rig, f"{rig.outside_url}/x"))
        assert answer.status == 503
        assert answer.json()["error"] == "too_many_connections"
    finally:
        for _, writer in held:
            writer.close()
    async with asyncio.timeout(STEP):                     # room again once they close
        while True:
            answer = await exchange(rig, request(rig, f"{rig.outside_url}/x"))
            if answer.status == 200:
                break
            await asyncio.sleep(0.02)


def test_the_head_parser_is_strict_about_what_it_reads() -> None:
    head = parse_head(b"POST http://a.example/x HTTP/1.1\r\nHost: a.example\r\n"
                      b"X_Under: 1\r\nX-Space:   padded value \t")
    assert (head.method, head.target, head.minor) == (b"POST", b"http://a.example/x", 1)
    assert head.values(b"x-under") == [b"1"]
    assert head.values(b"x-space") == [b"padded value"]


def test_a_head_an_agent_repeats_is_read_once_and_a_bad_one_every_time() -> None:
    data = b"GET http://a.example/poll HTTP/1.1\r\nHost: a.example\r\n\r\n"
    first = read_head(data)
    assert read_head(bytes(data)) is first                   # the same bytes: read once
    assert (first.method, first.target, first.values(b"host")) == (
        b"GET", b"http://a.example/poll", [b"a.example"])
    assert read_head(data.replace(b"poll", b"other")).target == b"http://a.example/other"
    smuggled = b"GET http://a.example/ HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n"
    for _ in range(2):                                       # refused, and never kept
        with pytest.raises(ForwardAnswer) as refused:
            read_head(smuggled)
        assert refused.value.status == 400
    large = b"GET http://a.example/ HTTP/1.1\r\nX-Fill: " + b"a" * 8000 + b"\r\n\r\n"
    assert read_head(large) is not read_head(large)          # read every time, never kept
    assert read_head(large).values(b"x-fill") == [b"a" * 8000]


# -- nothing leaks ---------------------------------------------------------------------

async def test_no_token_or_secret_in_any_answer_or_log_record(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[bytes] = []
    targets = ["http://coder.formation.invalid/", "http://ghost.formation.invalid/",
               "http://late.formation.invalid/", "http://entry.formation.invalid/",
               "http://CODER.formation.invalid/", f"http://{FAR_HOST}/",
               f"{rig.outside_url}/to-virtual"]
    for target in targets:
        answers.append((await exchange(rig, request(rig, target, method="POST",
                                                    extra="A2A-Version: 1.0\r\n",
                                                    body=rpc_body()))).data)
    answers.append((await exchange(rig, request(rig, targets[0], auth=False))).data)
    answers.append((await exchange(rig, b"GARBAGE\r\n\r\n")).data)
    assert len(answers) == len(targets) + 2 and all(answers)
    for data in answers:
        rig.assert_clean(data)
    rig.assert_clean(caplog.text)
    rig.assert_clean(" ".join(str(record.args) for record in caplog.records))


async def test_closing_the_proxy_ends_every_connection_quietly(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with echo_server() as port:
        idle = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
        tunnel = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
        tunnel[1].write(request(rig, f"127.0.0.1:{port}", method="CONNECT")
                        .replace(b"Connection: close\r\n", b""))
        refused = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
        refused[1].write(request(rig, "http://entry.formation.invalid/"))   # then lingers
        async with asyncio.timeout(STEP):
            assert (await tunnel[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            assert b" 403 " in await refused[0].readuntil(b"\r\n\r\n")
            await rig.proxy.close()
            for reader, writer in (idle, tunnel, refused):
                await reader.read(-1)                       # the proxy's end arrives
                writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", rig.proxy.port)
    assert [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING] == []
