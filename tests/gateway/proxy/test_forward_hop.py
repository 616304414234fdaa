"""The forward proxy's hop (gateway/proxy/door_hop.py): a request to a callee whose door
the member knows goes to that door in bytes, on a kept-alive connection.

The door here is a scripted HTTP/1.1 server on a raw socket at 127.0.0.1, so each test
chooses the exact bytes of the answer (sized, chunked, up to the close, malformed) and
counts the connections. The first request to a callee learns its door (the httpx way);
each test's requests after it take the hop, which ``hop_only`` checks by making the
httpx way fail. Security tests are named after the attack.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.metrics import DoorMetrics
from gateway.proxy.call_bounds import CallBounds
from gateway.proxy.door_hop import HopFailed, parse_answer_head, read_answer_head
from gateway.proxy.formation import FormationTransport
from gateway.proxy.forward import ForwardProxy
from gateway.proxy.http_head import MalformedHead, head_lines
from tests.support.auth import mint
from tests.support.proxy_fakes import Doors

TOKEN = mint("planner", "coder")
TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STEP = 5.0
SIZED = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

Script = Callable[[bytes, bytes], list[bytes]]


@dataclass
class Door:
    """A door that answers each request with what ``script(head, body)`` returns (the
    pieces written apart, a ``b""`` among them meaning "wait for ``release``"), and
    closes the connection after an answer when ``close_idle`` is set or the answer
    says ``connection: close``."""

    script: Script
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0
    close_idle: bool = False                # close each connection once it answered
    release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    handlers: list[asyncio.Task[None]] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.heads.append(head)
                answer = self.script(head, body)
                for piece in answer:
                    if piece == b"":
                        await asyncio.wait_for(self.release.wait(), STEP)
                        continue
                    writer.write(piece)
                    await writer.drain()
                if self.close_idle or b"connection: close" in b"".join(answer).lower():
                    break
        writer.close()


@dataclass
class HopRig:
    proxy: ForwardProxy
    door: Door
    metrics: DoorMetrics
    calls: list[tuple[str, str]]
    httpx_way: list[str]

    @property
    def auth(self) -> str:
        password = httpx.URL(self.proxy.url).password
        assert password
        return "Basic " + base64.b64encode(f"murmur:{password}".encode()).decode()

    async def raw(self, *requests: bytes) -> bytes:
        """Send ``requests`` on one connection, one after another; everything read back
        until the proxy closes or goes quiet for 0.5 s."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.proxy.port)
        for request in requests:
            writer.write(request)
        await writer.drain()
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            while chunk := await asyncio.wait_for(reader.read(65536), 0.5):
                data += chunk
        writer.close()
        return data

    def request(self, path: str = "/", body: bytes = b"{}", method: str = "POST",
                extra: str = "") -> bytes:
        return (f"{method} http://coder.formation.invalid{path} HTTP/1.1\r\n"
                f"Host: coder.formation.invalid\r\nProxy-Authorization: {self.auth}\r\n"
                f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body

    async def learn(self) -> None:
        """The first request, which learns coder's door the httpx way."""
        answer = await self.raw(self.request("/learn"))
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert self.httpx_way == ["/learn"]


class Recording(httpx.AsyncBaseTransport):
    """The network under the transport's httpx way: records the paths it was handed."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def hop_rig(script: Script, *, bounds: CallBounds | None = None,
                  close_idle: bool = False) -> AsyncIterator[HopRig]:
    door = Door(script, close_idle=close_idle)
    server = await asyncio.start_server(door.serve, "127.0.0.1", 0)
    door.port = server.sockets[0].getsockname()[1]
    metrics = DoorMetrics()
    calls: list[tuple[str, str]] = []
    httpx_way: list[str] = []
    transport = FormationTransport(
        Recording(httpx_way), tokens={"coder": TOKEN},
        doors=Doors({"coder": f"http://127.0.0.1:{door.port}"}), allow=["localhost"],
        on_call=lambda callee, url: calls.append((callee, url)) or TRACEPARENT,
        metrics=metrics, bounds=bounds)
    proxy = ForwardProxy(transport, trust=lambda: "trusted")
    await proxy.start()
    try:
        yield HopRig(proxy, door, metrics, calls, httpx_way)
    finally:
        await proxy.close()
        await transport.aclose()
        server.close()
        for writer in door.writers:
            writer.close()
        await asyncio.wait_for(asyncio.gather(*door.handlers, return_exceptions=True), STEP)
        await server.wait_closed()


def sized(_: bytes, __: bytes) -> list[bytes]:
    return [SIZED]


def header_values(head: bytes, name: bytes) -> list[bytes]:
    return [line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(name + b":")]


# -- the hop -----------------------------------------------------------------------------

async def test_after_the_first_request_calls_go_on_one_kept_alive_connection() -> None:
    async with hop_rig(sized) as rig:
        await rig.learn()
        answers = [await rig.raw(rig.request(f"/call{n}")) for n in range(3)]
        assert all(answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"{}")
                   for answer in answers)
        assert rig.httpx_way == ["/learn"]                  # the rest took the hop
        assert [head.split(b" ")[1] for head in rig.door.heads] == [
            b"/learn", b"/call0", b"/call1", b"/call2"]
        assert rig.door.connections == 2                    # httpx's, then the hop's one
        assert rig.calls == [("coder", f"http://coder.formation.invalid{path}")
                             for path in ("/learn", "/call0", "/call1", "/call2")]
        assert rig.metrics.proxy_calls[("coder", "ok")] == 4


async def test_the_hop_strips_and_stamps_as_the_transport_does() -> None:
    async with hop_rig(sized) as rig:
        await rig.learn()
        await rig.raw(rig.request("/x?q=1", extra=(
            "Authorization: Bearer agent-own\r\nX-Murmur-Trust: trusted-by-me\r\n"
            "x_murmur_task_origin: user\r\ntraceparent: 00-aaaa-bbbb-01\r\n"
            "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Kept: yes\r\n")))
        head = rig.door.heads[-1]
        assert head.startswith(b"POST /x?q=1 HTTP/1.1\r\n")
        assert header_values(head, b"authorization") == [b"Bearer " + TOKEN.encode()]
        assert header_values(head, b"x-murmur-task-origin") == [b"peer"]
        assert header_values(head, b"x-murmur-task-trust") == [b"trusted"]
        assert header_values(head, b"traceparent") == [TRACEPARENT]
        assert header_values(head, b"host") == [f"127.0.0.1:{rig.door.port}".encode()]
        assert header_values(head, b"x-kept") == [b"yes"]
        assert header_values(head, b"x-hop") == [] and header_values(head, b"connection") == []
        assert b"x_murmur" not in head.lower() and b"proxy-authorization" not in head.lower()
        assert header_values(head, b"content-length") == [b"2"]


async def test_a_door_that_closed_an_idle_connection_is_asked_again_on_a_new_one() -> None:
    async with hop_rig(sized, close_idle=True) as rig:
        await rig.learn()
        first = await rig.raw(rig.request("/one"))
        await asyncio.sleep(0.05)       # the door's close arrives while the hop is idle
        second = await rig.raw(rig.request("/two"))
        assert first.endswith(b"{}") and second.endswith(b"{}")
        assert [head.split(b" ")[1] for head in rig.door.heads][-2:] == [b"/one", b"/two"]
        assert rig.httpx_way == ["/learn"]


async def test_a_door_that_closes_before_answering_is_a_502_naming_the_member() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        return [SIZED] if b"/learn" in head else [b"HTTP/1.1 200 OK\r\ncontent-le"]

    async with hop_rig(script, close_idle=True) as rig:
        await rig.learn()
        answer = await rig.raw(rig.request("/broken"))
        assert answer.startswith(b"HTTP/1.1 502 ")
        assert b"the door of member 'coder' cannot be reached (RemoteProtocolError)" in answer
        assert str(rig.door.port).encode() not in answer
        assert rig.metrics.proxy_calls[("coder", "unreachable")] == 1


async def test_response_splitting_a_door_answer_with_a_lone_lf_is_refused() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        if b"/learn" in head:
            return [SIZED]
        return [b"HTTP/1.1 200 OK\r\nx-a: 1\nset-cookie: evil=1\r\ncontent-length: 2\r\n\r\n{}"]

    async with hop_rig(script) as rig:
        await rig.learn()
        answer = await rig.raw(rig.request("/split"))
        assert answer.startswith(b"HTTP/1.1 502 ")
        assert b"evil" not in answer


async def test_a_chunked_answer_goes_to_the_agent_event_by_event() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        if b"/stream" not in head:
            return [SIZED]
        return [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n", b"b\r\ndata: one\n\n\r\n", b"",
                b"b\r\ndata: two\n\n\r\n0\r\n\r\n"]

    async with hop_rig(script) as rig:
        await rig.learn()
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy.port)
        writer.write(rig.request("/stream"))
        seen = b""
        async with asyncio.timeout(STEP):
            while b"data: one" not in seen:
                seen += await reader.read(65536)
        assert b"data: two" not in seen                 # the first event came alone
        rig.door.release.set()
        async with asyncio.timeout(STEP):
            while not seen.endswith(b"0\r\n\r\n"):
                seen += await reader.read(65536)
        assert b"transfer-encoding: chunked" in seen.lower()
        assert b"data: two" in seen
        writer.write(rig.request("/after"))             # the connection still serves
        async with asyncio.timeout(STEP):
            rest = await reader.readuntil(b"{}")
        assert rest.startswith(b"HTTP/1.1 200 OK")
        writer.close()


async def test_an_answer_that_ends_at_the_close_is_relayed_and_its_connection_dropped() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        if b"/learn" in head:
            return [SIZED]
        return [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"]

    async with hop_rig(script) as rig:
        await rig.learn()
        answer = await rig.raw(rig.request("/closing"))
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"transfer-encoding: chunked" in answer.lower()   # reframed for the agent
        assert answer.endswith(b"\r\n\r\n9\r\nall of it\r\n0\r\n\r\n")
        again = await rig.raw(rig.request("/again"))
        assert again.endswith(b"all of it\r\n0\r\n\r\n")
        assert rig.door.connections == 3                         # httpx's, then one each


async def test_head_204_and_304_answers_carry_no_body_and_keep_the_connection() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        if head.startswith(b"HEAD"):
            return [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"]
        if b"/empty" in head:
            return [b"HTTP/1.1 204 No Content\r\n\r\n"]
        if b"/same" in head:            # a 304's Content-Length is no body's
            return [b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n"]
        return [SIZED]

    async with hop_rig(script) as rig:
        await rig.learn()
        answer = await rig.raw(rig.request("/h", body=b"", method="HEAD"),
                               rig.request("/empty"), rig.request("/same"),
                               rig.request("/last"))
        assert answer.count(b"HTTP/1.1 ") == 4
        assert b"HTTP/1.1 304 Not Modified\r\n" in answer
        assert b"content-length: 5\r\n" in answer.lower()
        assert answer.endswith(b"{}")
        assert rig.door.connections == 2


async def test_pipelined_requests_are_answered_in_order() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        path = head.split(b" ")[1]
        return [b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(path), path)]

    async with hop_rig(script) as rig:
        await rig.learn()
        answer = await rig.raw(*(rig.request(f"/p{n}") for n in range(4)))
        assert [part.rsplit(b"\r\n\r\n", 1)[-1] for part in answer.split(b"HTTP/1.1 ")[1:]] \
            == [b"/p0", b"/p1", b"/p2", b"/p3"]


async def test_confused_deputy_a_callees_redirect_to_a_member_loses_its_location() -> None:
    def script(head: bytes, _: bytes) -> list[bytes]:
        if b"/learn" in head:
            return [SIZED]
        return [b"HTTP/1.1 307 Temporary Redirect\r\n"
                b"location: http://entry.formation.invalid/\r\ncontent-length: 0\r\n\r\n"]

    async with hop_rig(script) as rig:
        await rig.learn()
        answer = await rig.raw(rig.request("/redirect"))
        assert answer.startswith(b"HTTP/1.1 307 ")
        assert b"entry.formation.invalid" not in answer
        assert b"Proxy-Status: murmur; error=formation_refused" in answer


async def test_the_hop_spends_the_members_call_limit_as_the_transport_does() -> None:
    body = (b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
            b'{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}}')
    async with hop_rig(sized, bounds=CallBounds(calls=2)) as rig:
        await rig.learn()                                   # a GET-like POST: no task
        answers = [await rig.raw(rig.request("/", body=body)) for _ in range(3)]
        assert [answer.split(b" ")[1] for answer in answers] == [b"200", b"200", b"403"]
        assert b"limits.calls" in answers[2]
        assert len(rig.door.heads) == 3                     # the third never left


async def test_a_door_that_went_away_is_a_502_and_the_next_call_tries_again() -> None:
    async with hop_rig(sized, close_idle=True) as rig:
        await rig.learn()
        rig.door.script = lambda head, body: []             # reads, then closes silently
        answer = await rig.raw(rig.request("/gone"))
        assert answer.startswith(b"HTTP/1.1 502 ")
        rig.door.script = sized
        assert (await rig.raw(rig.request("/back"))).endswith(b"{}")


async def test_token_leak_no_repr_of_a_hop_or_of_a_known_door_shows_the_token() -> None:
    transport = FormationTransport(
        Recording([]), tokens={"coder": TOKEN},
        doors=Doors({"coder": "http://127.0.0.1:9"}), allow=["localhost"])
    virtual = transport.virtual_target(httpx.URL("http://coder.formation.invalid/x"))
    assert virtual is not None
    assert transport.member_hop(virtual, "GET", [], b"") is None     # no door known yet
    with pytest.raises(httpx.TransportError):   # learns the door, then cannot reach it
        await transport.handle_async_request(
            httpx.Request("GET", "http://coder.formation.invalid/x"))
    hop = transport.member_hop(virtual, "GET", [], b"")
    assert hop is not None and TOKEN.encode() in hop.head
    assert TOKEN not in repr(hop)
    door = transport._shared.known["coder"]     # the door keeps its stamp lines
    assert any(TOKEN.encode() in lines for lines in door.stamp_lines.values())
    assert TOKEN not in repr(door)
    await transport.aclose()


async def test_idle_connections_to_a_door_that_went_away_are_closed_at_the_next_open(
        ) -> None:
    from gateway.proxy.door_hop import DoorConnections

    door = Door(sized)
    server = await asyncio.start_server(door.serve, "127.0.0.1", 0)
    address = ("127.0.0.1", server.sockets[0].getsockname()[1])
    doors = DoorConnections(connect_seconds=STEP)
    request = b"GET / HTTP/1.1\r\nHost: door\r\n\r\n"
    connection, answer = await doors.send(address, request)
    assert answer.status == 200 and await connection.reader.readexactly(2) == b"{}"
    doors.release(connection)
    assert "1 idle" in repr(doors)
    for writer in door.writers:               # the door ends (a member restarted)
        writer.close()
    await asyncio.sleep(0.1)
    server.close()
    other = Door(sized)
    second = await asyncio.start_server(other.serve, "127.0.0.1", 0)
    elsewhere = ("127.0.0.1", second.sockets[0].getsockname()[1])
    connection, _ = await doors.send(elsewhere, request)       # a new door: a new open
    assert connection.reader is not None and "0 idle" in repr(doors)
    doors.discard(connection)
    doors.close()
    second.close()
    for writer in other.writers:
        writer.close()
    await asyncio.gather(*door.handlers, *other.handlers, return_exceptions=True)


# -- the heads ---------------------------------------------------------------------------

@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nHost: a\nX: b",             # a lone LF
    b"GET / HTTP/1.1\r\nHost: a\rX: b",             # a lone CR
    b"GET / HTTP/1.1\r\nHost : a",                  # a space before the colon
    b"GET / HTTP/1.1\r\nHost: a\r\n folded",        # line folding
    b"GET / HTTP/1.1\r\nHost: a\x00b",              # a control character
    b"GET / HTTP/1.1\r\nno colon here",
    b"GET / HTTP/1.1\r\nHost",                      # a known name without its colon
])
def test_request_smuggling_a_head_read_two_ways_is_refused(head: bytes) -> None:
    head_lines(b"GET / HTTP/1.1\r\nHost: a")       # the name is known now
    with pytest.raises(MalformedHead):
        head_lines(head)


def test_a_head_reads_names_as_compared_and_values_without_their_spaces() -> None:
    first, headers, keys = head_lines(b"GET / HTTP/1.1\r\nX_Trace_Id:  a b \t\r\nHost:a")
    assert first == b"GET / HTTP/1.1"
    assert headers == [(b"X_Trace_Id", b"a b"), (b"Host", b"a")]
    assert keys == [b"x-trace-id", b"host"]


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 100 Continue",                                       # no interim answers
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked",
    b"HTTP/1.1 200 OK\r\ncontent-length: -1",
    b"HTTP/2 200",
])
def test_an_answer_head_with_ambiguous_framing_is_no_doors(head: bytes) -> None:
    with pytest.raises(HopFailed):
        parse_answer_head(head)


def test_an_answer_head_says_its_framing() -> None:
    sized_head = parse_answer_head(b"HTTP/1.1 201 Created\r\nContent-Length: 7")
    assert (sized_head.status, sized_head.reason, sized_head.length) == (201, b"Created", 7)
    assert not sized_head.chunked and not sized_head.close
    chunked = parse_answer_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                b"Connection: close")
    assert chunked.chunked and chunked.close and chunked.length is None
    assert parse_answer_head(b"HTTP/1.0 200 OK").close


def test_an_answer_head_a_door_repeats_is_read_once_and_a_bad_one_every_time() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nx-kept: once\r\n\r\n"
    first = read_answer_head(head)
    assert read_answer_head(bytes(head)) is first            # the same bytes: read once
    assert (first.length, first.headers[1], first.raw) == (12, (b"x-kept", b"once"), head)
    other = read_answer_head(head.replace(b"12", b"13"))
    assert other.length == 13 and other is not first
    for _ in range(2):                                      # refused, and never kept
        with pytest.raises(HopFailed):
            read_answer_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2"
                             b"\r\n\r\n")
    for number in range(600):                               # the cache stays bounded
        read_answer_head(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % number)
    assert 0 < len(read_answer_head) <= 256
    large = b"HTTP/1.1 200 OK\r\nx-fill: " + b"a" * 8000 + b"\r\ncontent-length: 0\r\n\r\n"
    assert read_answer_head(large) is not read_answer_head(large)   # never kept
    assert read_answer_head(head).length == 12
