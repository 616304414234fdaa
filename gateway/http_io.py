"""Small pure-ASGI helpers the door's routes share: read a bounded body, send a response,
wait for the client to go away."""

from __future__ import annotations

from gateway.errors import GatewayError
from gateway.types import Headers, Receive, Scope, Send

JSON_HEADERS: Headers = [(b"content-type", b"application/json")]


class BodyTooLarge(GatewayError):
    """The request body is longer than the door reads."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, or BodyTooLarge once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_response(send: Send, status: int, body: bytes = b"",
                        headers: Headers | None = None, *, head: bool = False) -> None:
    """One complete response; ``head`` sends the headers of ``body`` without it."""
    all_headers = list(headers) if headers is not None else list(JSON_HEADERS)
    all_headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def send_json(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]})
    await send({"type": "http.response.body", "body": body})


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has gone (the body, if unread, is skipped)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case) in ``scope``."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None
