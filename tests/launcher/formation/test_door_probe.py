"""The launcher's readiness probe (launcher/formation/ready.py, ``DoorProbe``): one plain
HTTP/1.1 GET of the card with the operator token, the answer's body read by its
``Content-Length``, chunked or to the end, anything but a 200 with a JSON object
nothing, and no answer in time nothing."""

from __future__ import annotations

import asyncio
import json

from launcher.formation.ready import DoorProbe

CARD = {"name": "coder", "capabilities": {"extensions": []}}


async def serve_once(answer: bytes, seen: list[bytes],
                     delay: float = 0.0) -> tuple[asyncio.Server, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        await asyncio.sleep(delay)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def probe(answer: bytes, *, delay: float = 0.0, timeout: float = 2.0
          ) -> tuple[object, list[bytes]]:
    seen: list[bytes] = []

    async def run() -> object:
        server, url = await serve_once(answer, seen, delay)
        async with server:
            return await DoorProbe().card(url, "operator-secret", timeout)

    return asyncio.run(run()), seen


def test_a_card_by_content_length_and_the_request_the_door_sees() -> None:
    body = json.dumps(CARD).encode()
    card, seen = probe(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert card == CARD
    request = seen[0].decode()
    assert request.startswith("GET /.well-known/agent-card.json HTTP/1.1\r\n")
    assert "Authorization: Bearer operator-secret\r\n" in request
    assert "Host: 127.0.0.1:" in request and "Connection: close\r\n" in request


def test_a_chunked_card_is_read_whole() -> None:
    body = json.dumps(CARD).encode()
    half = len(body) // 2
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half,
                                                        body[half:])
    card, _ = probe(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    assert card == CARD


def test_anything_but_a_json_object_in_a_200_is_no_card() -> None:
    assert probe(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}")[0] is None
    assert probe(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")[0] is None
    assert probe(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]")[0] is None
    assert probe(b"garbage")[0] is None
    assert probe(b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n{}")[0] is None
    assert probe(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}")[0] is None


def test_no_answer_in_time_and_no_door_are_no_card() -> None:
    assert probe(b"HTTP/1.1 200 OK\r\n\r\n{}", delay=1.0, timeout=0.2)[0] is None
    assert asyncio.run(DoorProbe().card("http://127.0.0.1:1", "t", 0.5)) is None
