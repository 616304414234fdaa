"""AiohttpTransport, the proxy's pooled inner transport, against a real uvicorn server on
127.0.0.1 (port 0): what httpx callers rely on keeps working. Skipped where aiohttp is
not installed (the proxy then uses httpx's own transport)."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

pytest.importorskip("aiohttp")

from gateway.proxy.aiohttp_transport import AiohttpTransport, default_inner_transport  # noqa: E402
from gateway.proxy.call_member import MemberCalls  # noqa: E402
from gateway.proxy.formation import FormationClient, FormationTransport  # noqa: E402
from tests.support.proxy_fakes import Doors, FakeDoor  # noqa: E402

Scope = dict[str, Any]


async def app(scope: Scope, receive: Any, send: Any) -> None:
    """Echoes the request; a few paths behave specially."""
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(3):
            await send({"type": "http.response.body", "body": f"data: {n}\n\n".encode(),
                        "more_body": True})
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/gzip":
        payload = gzip.compress(b"squeezed")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-encoding", b"gzip")]})
        await send({"type": "http.response.body", "body": payload})
        return
    if path == "/redirect":
        await send({"type": "http.response.start", "status": 302,
                    "headers": [(b"location", b"/elsewhere")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/slow":
        await asyncio.sleep(1.0)
    echo = {"method": scope["method"], "path": path, "query": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "body": body.decode()}
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"x-multi", b"a"),
                            (b"x-multi", b"b")]})
    await send({"type": "http.response.body", "body": json.dumps(echo).encode()})


async def serve(asgi: Any) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    server = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, task, port


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server, task, number = await serve(app)
    yield number
    server.should_exit = True
    await task


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=AiohttpTransport()) as http:
        yield http


def header_values(echo: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in echo["headers"] if key == name]


async def test_request_reaches_the_server_as_httpx_built_it(
        client: httpx.AsyncClient, port: int) -> None:
    response = await client.post(f"http://127.0.0.1:{port}/rpc?x=1%202", json={"a": 1},
                                 headers={"Authorization": "Bearer t", "X-Dup": "1"})
    echo = response.json()
    assert (echo["method"], echo["path"], echo["query"]) == ("POST", "/rpc", "x=1%202")
    assert json.loads(echo["body"]) == {"a": 1}
    assert header_values(echo, "host") == [f"127.0.0.1:{port}"]
    assert header_values(echo, "authorization") == ["Bearer t"]
    assert header_values(echo, "content-length") == [str(len(echo["body"]))]
    assert header_values(echo, "content-type") == ["application/json"]
    assert response.headers.get_list("x-multi") == ["a", "b"]
    assert response.http_version == "HTTP/1.1"


async def test_streamed_response_arrives_chunk_by_chunk(
        client: httpx.AsyncClient, port: int) -> None:
    arrivals = []
    async with client.stream("GET", f"http://127.0.0.1:{port}/stream") as response:
        async for line in response.aiter_lines():
            if line:
                arrivals.append((line, time.monotonic()))
    assert [line for line, _ in arrivals] == ["data: 0", "data: 1", "data: 2"]
    assert arrivals[-1][1] - arrivals[0][1] >= 0.08      # not buffered to the end


async def test_gzip_body_is_decoded_once_by_httpx(client: httpx.AsyncClient, port: int) -> None:
    response = await client.get(f"http://127.0.0.1:{port}/gzip")
    assert response.content == b"squeezed"


async def test_redirect_is_returned_not_followed(client: httpx.AsyncClient, port: int) -> None:
    response = await client.get(f"http://127.0.0.1:{port}/redirect")
    assert response.status_code == 302 and response.headers["location"] == "/elsewhere"


async def test_refused_connection_is_httpx_connect_error(client: httpx.AsyncClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{free}/")


async def test_read_timeout_is_httpx_read_timeout(client: httpx.AsyncClient, port: int) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await client.get(f"http://127.0.0.1:{port}/slow", timeout=httpx.Timeout(5, read=0.1))


async def test_connections_are_reused(port: int) -> None:
    transport = AiohttpTransport(limit=4)
    async with httpx.AsyncClient(transport=transport) as http:
        await asyncio.gather(*(http.get(f"http://127.0.0.1:{port}/") for _ in range(40)))
        session = transport._session
        assert session is not None
        connector = session.connector
        assert connector is not None and connector.limit == 4
    assert transport._session is None


def test_default_inner_transport_is_aiohttp_when_installed() -> None:
    assert isinstance(default_inner_transport(), AiohttpTransport)


async def test_call_member_over_a_real_socket_through_the_proxy() -> None:
    door = FakeDoor()
    server, task, number = await serve(door)
    try:
        proxy = FormationTransport(AiohttpTransport(), tokens={"coder": "mft1.a.b"},
                                   doors=Doors({"coder": f"http://127.0.0.1:{number}"}),
                                   allow=["localhost"])
        calls = MemberCalls(proxy, peers=["coder"], trust="trusted",
                            deadline=time.monotonic() + 10)
        handle = await calls.call_member("coder", "over tcp")
        assert await handle == "answer to: over tcp"
        assert door.rpcs("SubscribeToTask")[0].values("authorization") == ["Bearer mft1.a.b"]
        async with FormationClient(transport=proxy.with_trust(None)) as http:
            response = await http.post("http://coder.formation.invalid/", json={})
        assert response.status_code == 200
        await calls.aclose()
        await proxy.aclose()
    finally:
        server.should_exit = True
        await task


async def test_a_call_to_a_member_over_aiohttp_goes_stamped_and_its_failure_names_no_door(
        port: int) -> None:
    """The proxy hands aiohttp the call's parts (no second httpx.Request): the door gets
    its own Host, one Authorization and the stamps, the component's own Authorization and
    x-murmur- headers are gone, and a door that cannot be reached is named by the
    component's request, never by the door's address."""
    proxy = FormationTransport(AiohttpTransport(), tokens={"coder": "mft1.a.b"},
                               doors=Doors({"coder": f"http://127.0.0.1:{port}"}),
                               allow=["localhost"], trust=lambda: "trusted")
    try:
        async with FormationClient(transport=proxy) as http:
            response = await http.post("http://coder.formation.invalid/x?q=1", content=b"hi",
                                       headers={"Authorization": "Bearer mine",
                                                "X-Murmur-Task-Origin": "user"})
        echo = response.json()
        assert (echo["method"], echo["path"], echo["query"], echo["body"]) == (
            "POST", "/x", "q=1", "hi")
        assert header_values(echo, "host") == [f"127.0.0.1:{port}"]
        assert header_values(echo, "authorization") == ["Bearer mft1.a.b"]
        assert header_values(echo, "x-murmur-task-origin") == ["peer"]
        assert header_values(echo, "x-murmur-task-trust") == ["trusted"]
        assert str(response.request.url) == "http://coder.formation.invalid/x?q=1"
    finally:
        await proxy.aclose()
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        gone = spare.getsockname()[1]                      # bound, never listening
        unreachable = FormationTransport(
            AiohttpTransport(), tokens={"coder": "mft1.a.b"},
            doors=Doors({"coder": f"http://127.0.0.1:{gone}"}), allow=["localhost"])
        try:
            async with FormationClient(transport=unreachable) as http:
                with pytest.raises(httpx.ConnectError) as failed:
                    await http.get("http://coder.formation.invalid/")
        finally:
            await unreachable.aclose()
    assert str(failed.value.request.url) == "http://coder.formation.invalid/"
    assert str(gone) not in str(failed.value) and "mft1" not in str(failed.value)
