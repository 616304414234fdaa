"""The door's JSON-RPC binding: one JSON-RPC request per HTTP request, framed over the
door's A2A methods (:mod:`gateway.door.methods`: the A2A 1.0 methods plus
``murmur.WatchSession`` and ``murmur.StopSession``).

Pure ASGI. A request is judged in this order, the first failure answering (docs/door.md,
"Protocol"): the ``Content-Type`` (``-32005`` unless JSON, before the body is read), the
body (read once, or taken already parsed from the auth middleware's ``RPC_SCOPE_KEY``;
``-32700``), the JSON-RPC envelope (``-32600``), the A2A version (``-32009``, before the
method name is looked up), the method (``-32601``), then the method's own parameters
(``-32602``). A unary answer is one ``dumps``; streams are Server-Sent Events that end
when the task does, or when the client goes away, and that are never silent for
``keepalive`` seconds (an SSE comment fills the gap: one timer serves every stream).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.a2a.jsonrpc import (
    RequestError,
    RequestId,
    RpcError,
    encode_error,
    encode_result,
    parse_body,
    parse_request,
)
from gateway.caller import RPC_SCOPE_KEY, Caller, caller_of
from gateway.door.methods import A2AMethods, Streaming
from gateway.http_io import (
    JSON_MEDIA_TYPES,
    BodyTooLarge,
    is_json_content_type,
    read_body,
    requested_version,
    send_json,
    serves_version,
)
from gateway.protocol import A2A_VERSION, VERSION_HEADER
from gateway.sse import SSE_HEADERS, KeepAlive, StreamFraming, serve_stream, sse_event
from gateway.trace.context import (
    INCOMING_TRACEPARENT,
    TASK_STARTING_METHODS,
    incoming_traceparent,
)
from gateway.types import Headers, Receive, Scope, Send

log = logging.getLogger("murmur.door")

_VERSION_HEADER_BYTES = VERSION_HEADER.encode("ascii")
#: What a request without ``A2A-Version`` means (A2A 1.0 section 3.6.2).
VERSION_WHEN_ABSENT = "0.3"


class JsonRpcBinding:
    """``POST /``: one JSON-RPC request per HTTP request, judged in the order of the
    module docstring, then handed to ``methods`` (a local door's or a relay's); streams
    are Server-Sent Events kept alive by the door's one ``keepalive`` timer."""

    def __init__(self, methods: A2AMethods, *, max_body: int, keepalive: KeepAlive) -> None:
        self._methods = methods
        self._max_body = max_body
        self._keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id: RequestId = None
        status = 200
        try:
            content_type, version = _rpc_headers(scope)
            if not is_json_content_type(content_type):
                raise content_type_not_supported()
            value = scope.get(RPC_SCOPE_KEY)
            if value is None:
                value = parse_body(await read_body(receive, self._max_body))
            request = parse_request(value)
            request_id = request.id
            check_version(scope, version)  # before the name: 0.3 names are not ours
            unary, streaming = self._methods.handlers(request.method)
            caller = caller_of(scope)
            if request.method in TASK_STARTING_METHODS:   # the task's span is its child
                INCOMING_TRACEPARENT.set(incoming_traceparent(scope))
            if streaming is not None:
                await serve_method_stream(self._methods, self._keepalive, receive, send,
                                          request.method, request.params, caller, streaming,
                                          _JsonRpcFraming(request_id))
                return
            assert unary is not None
            answer = encode_result(request_id, await unary(request.params, caller))
        except BodyTooLarge:
            status = 413
            answer = (b'{"error":"payload_too_large","message":'
                      b'"the request body is over the size this door reads"}')
        except RequestError as exc:
            answer = encode_error(exc.request_id, exc.error)
        except RpcError as exc:
            answer = encode_error(request_id, exc)
        except Exception:  # no traceback ever reaches a caller
            log.exception("JSON-RPC request %s failed", _loggable_id(request_id))
            answer = encode_error(request_id, RpcError("INTERNAL_ERROR"))
        await send_json(send, status, answer)



async def serve_method_stream(methods: A2AMethods, keepalive: KeepAlive, receive: Receive,
                              send: Send, method: str, params: dict[str, Any],
                              caller: Caller, streaming: Streaming, framing: StreamFraming,
                              headers: Headers = SSE_HEADERS) -> None:
    """A stream on either HTTP binding: opened by the methods (its place in the bounds,
    then the events), sent as Server-Sent Events in ``framing``, its place given back
    when it ends."""
    events, ticket = await methods.open_stream(method, params, caller, streaming)
    try:
        await serve_stream(receive, send, events, keepalive, framing, headers, ticket)
    finally:
        ticket.release()


def _rpc_headers(scope: Scope) -> tuple[bytes | None, bytes | None]:
    """The ``Content-Type`` (``None`` when absent or given twice) and the first
    ``A2A-Version`` header of a request, in one pass over its headers."""
    content_type: bytes | None = None
    types = 0
    version: bytes | None = None
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            content_type = value
            types += 1
        elif name == _VERSION_HEADER_BYTES and version is None:
            version = value
    return (content_type if types == 1 else None), version


def content_type_not_supported() -> RpcError:
    return RpcError(
        "CONTENT_TYPE_NOT_SUPPORTED",
        "send the body with Content-Type: application/json (or application/a2a+json)",
        metadata={"supportedContentTypes": ", ".join(sorted(JSON_MEDIA_TYPES))})


def check_version(scope: Scope, header_value: bytes | None) -> None:
    """A2A-Version from the header (or the query parameter the spec also allows)."""
    version = requested_version(scope, header_value)
    if serves_version(version):
        return
    if not version:
        raise RpcError(
            "VERSION_NOT_SUPPORTED",
            "a request without A2A-Version is A2A 0.3, which this door does not serve; "
            f"send the header A2A-Version: {A2A_VERSION}",
            metadata={"requestedVersion": VERSION_WHEN_ABSENT,
                      "supportedVersions": A2A_VERSION})
    raise RpcError(
        "VERSION_NOT_SUPPORTED",
        f"A2A-Version {version[:16]!r} is not served here; "
        f"send A2A-Version: {A2A_VERSION}",
        metadata={"requestedVersion": version[:16], "supportedVersions": A2A_VERSION})


def _loggable_id(request_id: RequestId) -> str:
    """A request id fit for a log line: a client may choose one of any length."""
    if isinstance(request_id, str):
        return repr(request_id[:64]) + ("..." if len(request_id) > 64 else "")
    return str(request_id)


def sse_result(request_id: RequestId, result: Any) -> bytes:
    """One JSON-RPC response as one SSE event."""
    return sse_event(encode_result(request_id, result))


def sse_error(request_id: RequestId, error: RpcError) -> bytes:
    """A JSON-RPC error as a stream's closing SSE event."""
    return sse_event(encode_error(request_id, error), event="error")


class _JsonRpcFraming:
    """JSON-RPC streams: each event a JSON-RPC response with the request's id."""

    __slots__ = ("_request_id",)

    def __init__(self, request_id: RequestId) -> None:
        self._request_id = request_id

    def event(self, result: Any) -> bytes:
        return sse_result(self._request_id, result)

    def error(self, error: RpcError) -> bytes:
        return sse_error(self._request_id, error)
