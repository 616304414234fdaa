"""What DoorAuth reads of a request, in the order it reads it.

1. the head, in one pass (:func:`scan_head`): the ``Authorization`` and ``Host`` values
   and how many of each, whether exactly one trust header says ``trusted``, the
   ``Content-Length``, and the headers the app may see (:data:`STRIPPED_HEADERS` are
   never among them);
2. for JSON-RPC, the body, bounded (:func:`check_declared_length` before it is read,
   :func:`read_rest` past its first message) and the one call in it (:func:`parse_rpc`,
   the door's strict JSON reader, called directly);
3. the app's receive after that, which replays the body (:class:`Replay`).

Standard library and ``gateway`` names only: this is every request's hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.a2a.jsonrpc import STRICT_JSON
from gateway.auth.refusals import Refused
from gateway.protocol import ORIGIN_HEADER, TRUST_HEADER
from gateway.types import Headers, Message, Receive

__all__ = ["STRIPPED_HEADERS", "Head", "Replay", "content_length_of", "parse_rpc",
           "check_declared_length", "read_rest", "scan_head", "without_stripped"]

_TRUST_HEADER = TRUST_HEADER.encode("ascii")
_ORIGIN_HEADER = ORIGIN_HEADER.encode("ascii")
#: Headers the app never sees: the credential, and origin/trust, which come only from it.
STRIPPED_HEADERS = frozenset({
    b"authorization", _ORIGIN_HEADER, _TRUST_HEADER,
    _ORIGIN_HEADER.replace(b"-", b"_"), _TRUST_HEADER.replace(b"-", b"_"),
})


# -- 1. the head -------------------------------------------------------------------------



#: What :func:`scan_head` returns: the ``Authorization`` value and how many there were,
#: the ``Host`` value and how many, whether the request is trusted (exactly one trust
#: header saying exactly ``trusted``), the ``Content-Length`` value, and the headers the
#: app may see. A tuple, not an object: this is built for every request.
Head = tuple[bytes | None, int, bytes | None, int, bool, bytes, Headers]


def scan_head(headers: Headers) -> Head:
    """One pass over the headers: note what the checks need, keep what the app may see."""
    authorization: bytes | None = None
    authorizations = 0
    host: bytes | None = None
    hosts = 0
    trust_value = b""
    trust_headers = 0
    content_length = b""
    kept: Headers = []
    for header in headers:
        name = header[0]
        if name == b"authorization":
            authorization = header[1]
            authorizations += 1
            continue
        if name == b"host":
            host = header[1]
            hosts += 1
        elif name == b"content-length":
            content_length = header[1]
        elif name in STRIPPED_HEADERS:
            if name == _TRUST_HEADER:
                trust_value = header[1]
                trust_headers += 1
            continue
        kept.append(header)
    return (authorization, authorizations, host, hosts,
            trust_headers == 1 and trust_value == b"trusted", content_length, kept)


# -- 2. the body and the call in it ------------------------------------------------------


def content_length_of(value: bytes) -> int:
    """A Content-Length value as a number; -1 when it is not one (the server judges it)."""
    return int(value) if value.isdigit() and len(value) < 20 else -1


def check_declared_length(content_length: bytes, max_body: int) -> None:
    """``413 payload_too_large`` when the ``Content-Length`` says the body is past
    ``max_body`` (before a byte of it is read)."""
    if content_length_of(content_length) > max_body:
        raise Refused("payload_too_large", limit=str(max_body))


async def read_rest(receive: Receive, first: bytes, limit: int) -> bytes | None:
    """The whole body of a request whose first message brought ``first`` and said more
    follows, or was already past ``limit``: ``413 payload_too_large`` past ``limit``,
    ``None`` if the client left."""
    chunks = [first]
    size = len(first)
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if not message.get("more_body", False) and size <= limit:
            return b"".join(chunks)
    raise Refused("payload_too_large", limit=str(limit))


#: The C scanner behind json.loads, called directly: for a GetTask-sized body json.loads
#: spends more around the scan than in it. It is the door's strict reader's (no NaN or
#: Infinity), so DoorAuth and the app accept exactly the same documents.
_scan_json: Callable[[str, int], tuple[Any, int]] = (
    STRICT_JSON.scan_once  # type: ignore[attr-defined]  # set in JSONDecoder.__init__
)
_JSON_SPACE = " \t\n\r"


def parse_rpc(body: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON-RPC request object (with a string method), or the refusal code.

    The body is parsed as ``json.loads(body)`` would (one UTF-8 JSON document, white
    space around it), but through the scanner directly."""
    try:
        text = body.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE)) if text[:1] in _JSON_SPACE else 0
        document, end = _scan_json(text, start)
    except (ValueError, RecursionError, StopIteration):  # StopIteration: no JSON value
        return None, "parse_error"
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return None, "parse_error"  # more after the JSON document
    # The json module builds exact dicts, lists and strs: ``type() is`` is isinstance here.
    if type(document) is dict:
        if type(document.get("method")) is str:
            return document, None
        return None, "invalid_request"
    return None, "batch_refused" if type(document) is list else "invalid_request"


# -- 3. the replay -----------------------------------------------------------------------


class Replay:
    """The app's receive after DoorAuth read the body: the body, then the client's own
    messages (so the app still learns of a disconnect). A class with slots, not a
    closure: one small object per request."""

    __slots__ = ("_body", "_receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> Message:
        body = self._body
        if body is None:
            return await self._receive()
        self._body = None
        return {"type": "http.request", "body": body, "more_body": False}


def without_stripped(headers: Headers) -> Headers:
    """``headers`` without the credential and origin/trust (the same list when none)."""
    for name, _ in headers:
        if name in STRIPPED_HEADERS:
            return [h for h in headers if h[0] not in STRIPPED_HEADERS]
    return headers
