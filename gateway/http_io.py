"""Small pure-ASGI helpers the door's routes share, in this order: read a bounded body,
send a response (and the door's own ``404``/``405`` refusals), wait for the client to go
away, read a header, and judge the two request headers DoorAuth and both bindings look at
(``Content-Type``, the requested A2A version)."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from gateway.errors import GatewayError
from gateway.protocol import A2A_VERSION, VERSION_HEADER
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


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    """The door's own refusal outside any binding: ``{"error": code, "message": ...}``."""
    await send_json(send, status, json.dumps({"error": code, "message": message},
                                             separators=(",", ":")).encode("utf-8"))


async def send_not_allowed(send: Send, allow: bytes) -> None:
    """``405`` naming the verbs the path answers (``allow``, as the ``Allow`` header)."""
    body = json.dumps({"error": "method_not_allowed",
                       "message": f"This path answers {allow.decode('ascii')} only."},
                      separators=(",", ":")).encode("utf-8")
    await send_response(send, 405, body, [(b"content-type", b"application/json"),
                                          (b"allow", allow)])


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


# --- Content-Type --------------------------------------------------------------------

#: The media types a JSON-RPC body may be declared as (any parameters allowed).
JSON_MEDIA_TYPES = frozenset({"application/json", "application/a2a+json"})
#: The spellings clients send, found with one set lookup before any parsing.
_USUAL_JSON_TYPES = frozenset({
    b"application/json", b"application/json; charset=utf-8", b"application/json;charset=utf-8",
    b"application/json; charset=UTF-8", b"application/json;charset=UTF-8",
    b"application/a2a+json",
})


def is_json_content_type(value: bytes | None) -> bool:
    """Whether a ``Content-Type`` value declares JSON: ``application/json`` or
    ``application/a2a+json``, in any case, with or without parameters. No value (or a
    value that is not text) is not JSON: a browser sends a body without one from any page,
    and the door must never serve such a request."""
    if value is None:
        return False
    if value in _USUAL_JSON_TYPES:
        return True
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return False
    return text.partition(";")[0].strip().lower() in JSON_MEDIA_TYPES


# --- the requested A2A version -------------------------------------------------------

_SERVED_MAJOR_MINOR = tuple(int(part) for part in A2A_VERSION.split("."))


def requested_version(scope: Scope, value: bytes | None) -> str:
    """The A2A version a request asks for: the ``A2A-Version`` header's ``value``, or
    else the ``A2A-Version`` query parameter (the specification allows both); ``""``
    when neither is given."""
    version = value.decode("latin-1").strip() if value is not None else ""
    if not version and scope.get("query_string"):
        query = bytes(scope["query_string"]).decode("latin-1")
        for key, parameter in parse_qsl(query):
            if key.lower() == VERSION_HEADER:
                return parameter.strip()
    return version


def serves_version(version: str) -> bool:
    """Whether ``version`` is the one this door serves: ``1.0`` or ``1.0.<patch>``."""
    if version == A2A_VERSION:
        return True
    parts = version.split(".")
    if len(parts) not in (2, 3) or not all(part.isdigit() and part.isascii()
                                           for part in parts):
        return False
    return (int(parts[0]), int(parts[1])) == _SERVED_MAJOR_MINOR
