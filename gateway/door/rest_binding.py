"""The door's HTTP+JSON binding (A2A 1.0 section 11): the door's A2A methods
(:mod:`gateway.door.methods`), the same handlers the JSON-RPC binding runs, in another
framing.

A request is judged in this order, the first failure answering (docs/bindings.md):

1. the route: the verb and path name a method (the :class:`gateway.routes.Route`
   DoorAuth classified, or the door when it runs without DoorAuth); a path of the
   binding with another verb is ``405`` with ``Allow``, any other path the door's
   ``404``;
2. the ``Content-Type``: a POST that announces a body, names a content type, or comes
   from a browser (an ``Origin`` header) must declare JSON (``-32005``, before the body
   is read), so no web page can send one without a CORS preflight;
3. the body, read once and bounded (``413`` past the door's limit), one JSON object
   (``-32700``);
4. the A2A version (``-32009``), before the method is looked up;
5. the method, from the door's one table (:meth:`gateway.door.methods.A2AMethods.handlers`:
   the push configuration paths are refused as their JSON-RPC methods are, and
   ``/extendedAgentCard`` is ``GetExtendedAgentCard``'s);
6. the parameters: the body's fields, then the path's ids, then the query's (camelCase,
   A2A 1.0 section 11.5; unknown names ignored), validated by the method's handler
   (``-32602`` naming the field).

A unary answer is ``200`` with the method's result as the body; a stream is Server-Sent
Events whose ``data`` is each ``StreamResponse`` (keep-alive comments as on JSON-RPC).
Every error is a ``google.rpc.Status`` with the ErrorInfo of the JSON-RPC table and that
row's HTTP status (:meth:`gateway.a2a.jsonrpc.RpcError.status_object`); a stream that fails
once open ends with an ``event: error`` carrying the same document. A busy member's
``503`` also says ``Retry-After`` (whole seconds, rounded up).
"""

from __future__ import annotations

import logging
import math
from typing import Any
from urllib.parse import unquote_plus

from gateway.a2a.jsonrpc import RequestError, RpcError, dumps, parse_body
from gateway.a2a.rest_routes import RestRoute
from gateway.caller import PUSH_METHODS, caller_of
from gateway.door.jsonrpc_binding import (
    check_version,
    content_type_not_supported,
    serve_method_stream,
)
from gateway.door.methods import A2AMethods, Streaming, Unary
from gateway.http_io import (
    BodyTooLarge,
    is_json_content_type,
    read_body,
)
from gateway.protocol import VERSION_HEADER
from gateway.routes import ROUTE_SCOPE_KEY, Route
from gateway.sse import SSE_HEADERS, KeepAlive, sse_event
from gateway.trace.context import (
    INCOMING_TRACEPARENT,
    TASK_STARTING_METHODS,
    incoming_traceparent,
)
from gateway.types import Headers, Receive, Scope, Send

log = logging.getLogger("murmur.door")

#: The media type of every JSON answer of the binding (A2A 1.0 section 11.1).
A2A_JSON: bytes = b"application/a2a+json"
#: Query parameters that are numbers or booleans on the wire (the rest are strings).
_INTEGER_QUERY = frozenset({"pageSize", "historyLength"})
_BOOLEAN_QUERY = {"true": True, "false": False}
#: Query parameters each method reads; any other name is ignored (section 5.7).
_QUERY_FIELDS: dict[str, frozenset[str]] = {
    "GetTask": frozenset({"historyLength"}),
    "ListTasks": frozenset({"contextId", "status", "pageSize", "pageToken", "historyLength",
                            "statusTimestampAfter", "includeArtifacts"}),
    "ListTaskPushNotificationConfigs": frozenset({"pageSize", "pageToken"}),
}
_VERSION = VERSION_HEADER.encode("ascii")
_ORIGIN = b"origin"


class RestBinding:
    """Every path of the HTTP+JSON binding, served by ``methods`` (a local door's or a
    relay's); streams are kept alive by the door's one ``keepalive`` timer."""

    def __init__(self, methods: A2AMethods, *, max_body: int, keepalive: KeepAlive) -> None:
        self._methods = methods
        self._keepalive = keepalive
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        door_route: Route = scope[ROUTE_SCOPE_KEY]
        route = door_route.rest
        if route is None:
            await _no_route(send, door_route.allowed)
            return
        try:
            params, unary, streaming = await self._request(scope, receive, route)
            caller = caller_of(scope)
            if route.method in TASK_STARTING_METHODS:     # the task's span is its child
                INCOMING_TRACEPARENT.set(incoming_traceparent(scope))
            if streaming is not None:
                await serve_method_stream(self._methods, self._keepalive, receive, send,
                                          route.method, params, caller, streaming,
                                          _RestFraming, SSE_HEADERS)
                return
            assert unary is not None
            body = dumps(await unary(params, caller))
        except BodyTooLarge:
            await _send(send, 413, b'{"error":"payload_too_large","message":'
                                   b'"the request body is over the size this door reads"}',
                        b"application/json")
            return
        except RequestError as exc:
            await _send_error(send, exc.error)
            return
        except RpcError as exc:
            await _send_error(send, exc)
            return
        except Exception:  # no traceback ever reaches a caller
            log.exception("HTTP+JSON %s failed", route.method)
            await _send_error(send, RpcError("INTERNAL_ERROR"))
            return
        await _send(send, 200, body)

    async def _request(self, scope: Scope, receive: Receive,
                       route: RestRoute) -> tuple[dict[str, Any], Unary | None, Streaming | None]:
        """Steps 2-5, and 6's gathering: the method's parameters from body, path and
        query, with its handler."""
        content_type: bytes | None = None
        content_types = 0
        version: bytes | None = None
        from_browser = False
        announced_body = False
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
                content_types += 1
            elif name == _VERSION and version is None:
                version = value
            elif name == _ORIGIN:
                from_browser = True
            elif name == b"content-length":
                announced_body = value != b"0"
            elif name == b"transfer-encoding":
                announced_body = True
        params: dict[str, Any] = {}
        if scope["method"] == "POST":
            json_declared = content_types == 1 and is_json_content_type(content_type)
            if (from_browser or announced_body or content_types) and not json_declared:
                raise content_type_not_supported()  # before a byte of the body is read
            body = await read_body(receive, self._max_body)
            if body.strip():
                if not json_declared:
                    raise content_type_not_supported()
                value = parse_body(body)
                if type(value) is not dict:
                    raise RpcError("INVALID_REQUEST", "the body must be one JSON object")
                params = value
            elif route.method in ("SendMessage", "SendStreamingMessage") and not json_declared:
                raise content_type_not_supported()
        check_version(scope, version)
        unary, streaming = self._methods.handlers(route.method)  # refused before its parameters
        if route.method in PUSH_METHODS:    # the path names the task and the config
            if route.task_id is not None:
                params["taskId"] = route.task_id
            if route.config_id is not None:
                params["id"] = route.config_id
        elif route.task_id is not None:
            params["id"] = route.task_id  # the path's id wins over one in the body
        if route.tenant is not None:
            params["tenant"] = route.tenant
        fields = _QUERY_FIELDS.get(route.method)
        if fields is not None and scope.get("query_string"):
            params.update(_query(scope["query_string"], fields))
        return params, unary, streaming


def _query(query_string: bytes, fields: frozenset[str]) -> dict[str, Any]:
    """The query's parameters among ``fields``, the first of each name, numbers and
    booleans as such (a value that is not one is passed on as text, and the method's
    validation names the field)."""
    found: dict[str, Any] = {}
    for part in query_string.decode("latin-1").split("&"):
        key, _, text = part.partition("=")
        if "%" in part or "+" in part:  # encoded: decoded as parse_qsl would (UTF-8)
            key, text = unquote_plus(key), unquote_plus(text)
        if key not in fields or key in found:
            continue
        value: Any = text
        if key in _INTEGER_QUERY and text.isdigit() and text.isascii() and len(text) < 10:
            value = int(text)
        elif key == "includeArtifacts" and text in _BOOLEAN_QUERY:
            value = _BOOLEAN_QUERY[text]       # strict: `yes` or `1` is refused by name
        found[key] = value
    return found


class _RestFraming:
    """HTTP+JSON streams: each event's ``data`` is the StreamResponse itself."""

    @staticmethod
    def event(result: Any) -> bytes:
        return sse_event(dumps(result))

    @staticmethod
    def error(error: RpcError) -> bytes:
        return sse_event(dumps(error.status_object()[1]), event="error")


async def _send(send: Send, status: int, body: bytes, media_type: bytes = A2A_JSON,
                extra: Headers | None = None) -> None:
    headers: Headers = [(b"content-type", media_type),
                        (b"content-length", str(len(body)).encode("ascii"))]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Send, error: RpcError) -> None:
    status, document = error.status_object()
    extra: Headers = []
    retry_ms = error.metadata.get("retryAfterMs")
    if retry_ms is not None and retry_ms.isdigit():
        extra.append((b"retry-after", str(max(1, math.ceil(int(retry_ms) / 1000))).encode()))
    await _send(send, status, dumps(document), A2A_JSON, extra)


async def _no_route(send: Send, allowed: tuple[str, ...]) -> None:
    """``404`` for a path of no binding, ``405`` with ``Allow`` for a verb the path does
    not take; both with a ``google.rpc.Status`` body, as every HTTP+JSON error has
    (A2A v1.0.1, section 11.6)."""
    if not allowed:
        await _send(send, 404, _status_body(404, "NOT_FOUND", "There is nothing at this path."))
        return
    allow = ", ".join(allowed)
    await _send(send, 405, _status_body(405, "UNIMPLEMENTED",
                                        f"This path answers {allow} only."),
                extra=[(b"allow", allow.encode("ascii"))])


def _status_body(code: int, status: str, message: str) -> bytes:
    """A ``google.rpc.Status`` of an error that is no A2A error (no ErrorInfo)."""
    return dumps({"error": {"code": code, "status": status, "message": message}})
