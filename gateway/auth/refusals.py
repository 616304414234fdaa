"""DoorAuth's answers: the one table of refusals, how each is sent, and log hygiene.

In this order: the table (:data:`REFUSALS`, one row per ``error`` code, with its status,
message and ``WWW-Authenticate``; the JSON-RPC ones answer in an HTTP 200), the
:class:`Refused` exception a check raises to give one of them, how an answer is built
(:func:`answer`) and sent on a WebSocket that was never accepted
(:func:`refuse_websocket`), then :func:`loggable`, which makes request text fit for one
log line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import GatewayError
from gateway.redaction import redact_request_text
from gateway.types import Headers, Receive, Scope, Send

__all__ = ["REFUSALS", "Refusal", "Refused", "answer", "loggable", "refuse_websocket"]

# -- the one table of refusals -----------------------------------------------------------

_REALM = 'Bearer realm="murmur"'


@dataclass(frozen=True, slots=True)
class Refusal:
    """How one refusal is answered. With ``rpc_code``: a JSON-RPC error in an HTTP 200."""

    status: int
    message: str
    www_authenticate: str | None = None
    rpc_code: int | None = None


#: Every answer DoorAuth gives itself, by its ``error`` code.
REFUSALS: dict[str, Refusal] = {
    "unauthenticated": Refusal(
        401, "This door needs a credential: send 'Authorization: Bearer <token>'.", _REALM),
    "invalid_token": Refusal(
        401, "The bearer token is not accepted at this door.",
        f'{_REALM}, error="invalid_token"'),
    "not_permitted": Refusal(
        403, "Member {member} holds no formation token for this member's door."),
    "insufficient_scope": Refusal(
        403, "The credential {credential} may not call {method}.",
        f'{_REALM}, error="insufficient_scope"'),
    "peer_not_accepted": Refusal(
        403, "This member takes no peer tasks (its manifest does not set "
             "exports.peer_tasks.accept: true)."),
    # Bounds along the edges (gateway.auth.edge_limits): after checks 1-8.
    "depth_exceeded": Refusal(
        403, "This call would be {depth} member calls deep; the formation allows {limit} "
             "(limits.depth in roster.yaml)."),
    "limit_reached": Refusal(
        403, "Member {member} has made its {limit} calls along this edge (limits.calls in "
             "roster.yaml)."),
    "rate_limited": Refusal(
        429, "Member {member} is at limits.{name} ({limit}) along this edge; offer the call "
             "again after Retry-After."),
    "payload_too_large": Refusal(
        413, "The request body is larger than this door accepts ({limit} bytes)."),
    "misdirected_request": Refusal(
        421, "This door answers only to a loopback Host (127.0.0.1, localhost or [::1]) "
             "with its own port."),
    "parse_error": Refusal(
        200, "Parse error: the body is not one UTF-8 JSON document.", rpc_code=-32700),
    "batch_refused": Refusal(
        200, "Invalid Request: a batch (JSON array) is not accepted; send one call per "
             "request.", rpc_code=-32600),
    "invalid_request": Refusal(
        200, "Invalid Request: expected one JSON-RPC object with a string 'method'.",
        rpc_code=-32600),
}


def answer(code: str, fields: Mapping[str, str] | None = None,
           retry_after: float | None = None) -> tuple[int, Headers, bytes]:
    """Status, headers and body of the refusal ``code`` (fields fill its message). With
    ``retry_after`` (seconds): a ``Retry-After`` header and ``retryAfterMs`` in the body."""
    refusal = REFUSALS[code]
    message = refusal.message.format_map(fields) if fields else refusal.message
    document: dict[str, Any]
    if refusal.rpc_code is None:
        document = {"error": code, "message": message}
        if retry_after is not None:
            document["retryAfterMs"] = math.ceil(retry_after * 1000)
    else:
        # JSON-RPC 2.0: the id of a request that could not be read is null.
        document = {"jsonrpc": "2.0", "id": None,
                    "error": {"code": refusal.rpc_code, "message": message}}
    body = json.dumps(document, separators=(",", ":")).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode("ascii")),
               (b"cache-control", b"no-store")]
    if refusal.www_authenticate is not None:
        headers.append((b"www-authenticate", refusal.www_authenticate.encode("ascii")))
    if retry_after is not None:
        headers.append((b"retry-after", str(math.ceil(retry_after)).encode("ascii")))
    return refusal.status, headers, body



class Refused(GatewayError):
    """Raised by a check of DoorAuth: answer with the refusal ``code``; ``reason`` goes
    to the log only, ``fields`` fill the message."""

    def __init__(self, code: str, reason: str = "", *, retry_after: float | None = None,
                 **fields: str) -> None:
        super().__init__(code)
        self.code = code
        self.reason = reason
        self.fields = fields
        #: Seconds a ``429`` asks the caller to wait (``Retry-After``).
        self.retry_after = retry_after


async def refuse_websocket(scope: Scope, receive: Receive, send: Send, status: int,
                           headers: Headers, body: bytes) -> None:
    """Refuse a WebSocket before it is accepted: the HTTP answer where the server can send
    one (the ``websocket.http.response`` extension), else a close with 1008 (policy)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


# -- log hygiene -------------------------------------------------------------------------

#: Control characters (C0, DEL, C1, line/paragraph separators) as visible escapes, so a
#: request cannot forge log lines or drive a terminal (CRLF, ANSI escape sequences).
_LOG_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
_LOG_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_LOG_LIMIT = 200


def loggable(text: str) -> str:
    """``text`` taken from a request, made safe for one log line: redacted, escaped, bounded."""
    # A client that put its token in the URL must not find it in the door's log.
    text = redact_request_text(text[: _LOG_LIMIT * 4]).translate(_LOG_ESCAPES)
    return text if len(text) <= _LOG_LIMIT else text[:_LOG_LIMIT] + "..."
