"""The door's JSON-RPC endpoint: A2A 1.0 methods plus ``murmur.WatchSession`` and
``murmur.StopSession``, dispatched to the task store.

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

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.a2a.jsonrpc import (
    RequestError,
    RequestId,
    RpcError,
    encode_error,
    encode_result,
    invalid_params,
    parse_body,
    parse_request,
)
from gateway.a2a.models import (
    IDENTIFIER_LIMIT,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from gateway.caller import PUSH_METHODS, RPC_SCOPE_KEY, Caller, caller_of
from gateway.door.streams import StreamBook
from gateway.door.tasks import StreamEvent, TaskRecord, TaskStore, acts_as_operator
from gateway.http_io import (
    JSON_MEDIA_TYPES,
    BodyTooLarge,
    is_json_content_type,
    read_body,
    requested_version,
    send_json,
    serves_version,
)
from gateway.protocol import A2A_VERSION, INTERRUPTED_STATES, TERMINAL_STATES, VERSION_HEADER
from gateway.sse import SSE_HEADERS, KeepAlive, StreamFraming, serve_stream, sse_event
from gateway.trace.bus import TraceBus
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

_GET_TASK_KEYS = frozenset({"id", "historyLength", "tenant"})
#: The longest a stream stays silent (seconds) before it sends an SSE comment: half the
#: 5 s read timeout of a2a-sdk's default client (httpx's default), a quarter of the 10 s
#: the issue allows. Silent streams get a comment every 1.25 to 2.5 s.
SSE_KEEPALIVE_SECONDS = 2.5

Unary = Callable[[dict[str, Any], Caller], Awaitable[Any]]
Streaming = Callable[[dict[str, Any], Caller], Awaitable[AsyncIterator[Any]]]


M = TypeVar("M", bound=BaseModel)


def validate_params(model: type[M], params: dict[str, Any]) -> M:
    """``params`` as ``model``, or ``-32602`` naming each field at fault."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise invalid_params(exc) from exc


def send_message_request(params: dict[str, Any]) -> SendMessageRequest:
    """A SendMessage's params validated (``-32602`` naming the field), a push
    configuration refused (``-32003``): the same for a local door and a relay."""
    request = validate_params(SendMessageRequest, params)
    configuration = request.configuration
    if configuration is not None and configuration.task_push_notification_config:
        raise RpcError("PUSH_NOTIFICATION_NOT_SUPPORTED",
                       "this door sends no push notifications; follow the task with "
                       "SubscribeToTask or GetTask")
    return request


class JsonRpcEndpoint:
    """``POST /``: one JSON-RPC request per HTTP request, judged in the order of the
    module docstring, then handed to the method's handler. A subclass fills
    ``_unary`` and ``_streaming`` (the local task store here, the relay in
    :mod:`gateway.relay.tasks`); ``murmur.StopSession`` and ``murmur.WatchSession`` are the
    session's own and the same for both. ``keepalive``: the longest a stream stays
    silent, in seconds, before a comment (default :data:`SSE_KEEPALIVE_SECONDS`)."""

    def __init__(self, trace: TraceBus, *, max_body: int, stop: Callable[[str], None],
                 keepalive: float | None = None, streams: StreamBook | None = None) -> None:
        # Read when the endpoint is built, so the module default is the one place to
        # change it (a test sets it small).
        keepalive = SSE_KEEPALIVE_SECONDS if keepalive is None else keepalive
        if not keepalive > 0:
            raise ValueError(f"keepalive must be a positive number of seconds, got {keepalive!r}")
        self._trace = trace
        self._max_body = max_body
        self._stop = stop
        #: The one keep-alive timer of this door's streams, on either binding.
        self.keepalive = KeepAlive(keepalive)
        #: The bounds on this door's live streams, on either binding (gateway/door/streams.py).
        self.streams = streams if streams is not None else StreamBook()
        self._unary: dict[str, Unary] = {"murmur.StopSession": self.stop_session}
        self._streaming: dict[str, Streaming] = {"murmur.WatchSession": self.watch_session}

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
            unary, streaming = self.handlers(request.method)
            caller = caller_of(scope)
            if request.method in TASK_STARTING_METHODS:   # the task's span is its child
                INCOMING_TRACEPARENT.set(incoming_traceparent(scope))
            if streaming is not None:
                await self.stream(receive, send, request.method, request.params, caller,
                                  streaming, _JsonRpcFraming(request_id))
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

    async def stream(self, receive: Receive, send: Send, method: str, params: dict[str, Any],
                     caller: Caller, streaming: Streaming, framing: StreamFraming,
                     headers: Headers = SSE_HEADERS) -> None:
        """A stream on either binding: its place in the book first (a refusal raises
        before anything is started), then the method, then the events."""
        ticket = self.streams.admit(caller.credential.owner, _followed_task(method, params))
        try:
            events = await streaming(params, caller)
            await serve_stream(receive, send, events, self.keepalive, framing, headers,
                               ticket)
        finally:
            ticket.release()

    def handlers(self, method: str) -> tuple[Unary | None, Streaming | None]:
        """The handler of ``method``: (unary, None) or (None, streaming); the refusal of a
        method this door does not serve (``-32601``, or the push and extended-card
        methods' own codes). The HTTP+JSON binding dispatches through this too, so both
        bindings run one implementation of each method."""
        unary = self._unary.get(method)
        if unary is not None:
            return unary, None
        streaming = self._streaming.get(method)
        if streaming is None:
            raise _unknown_method(method)
        return None, streaming

    # --- murmur methods ----------------------------------------------------------------

    async def stop_session(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        _operator_only(caller, "murmur.StopSession")
        # After this answer is on its way: the runtime may start ending at once.
        asyncio.get_running_loop().call_soon(self._stop, "stop_session")
        return {"stopping": True}

    async def watch_session(self, params: dict[str, Any],
                            caller: Caller) -> AsyncIterator[dict[str, Any]]:
        _operator_only(caller, "murmur.WatchSession")
        return self._trace_records()

    async def _trace_records(self) -> AsyncIterator[dict[str, Any]]:
        subscription = self._trace.subscribe()
        try:
            async for record in subscription:
                yield record
        finally:
            subscription.close()


class RpcEndpoint(JsonRpcEndpoint):
    """The JSON-RPC endpoint of a door whose tasks run here, in ``store``."""

    def __init__(self, store: TaskStore, trace: TraceBus, *, max_body: int,
                 stop: Callable[[str], None], keepalive: float | None = None,
                 streams: StreamBook | None = None) -> None:
        super().__init__(trace, max_body=max_body, stop=stop, keepalive=keepalive,
                         streams=streams)
        self._store = store
        self._unary.update({
            "SendMessage": self.send_message,
            "GetTask": self.get_task,
            "CancelTask": self.cancel_task,
            "ListTasks": self.list_tasks,
        })
        self._streaming.update({
            "SendStreamingMessage": self.send_streaming_message,
            "SubscribeToTask": self.subscribe_to_task,
        })

    # --- A2A methods -------------------------------------------------------------------

    async def send_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request, record = self._send(params, caller)
        configuration = request.configuration
        history = configuration.history_length if configuration else None
        if configuration is None or not configuration.return_immediately:
            await self._store.settled(record)
            if record.reply is not None and not record.revealed:
                return {"message": record.reply}
        record.revealed = True
        return {"task": record.snapshot(history)}

    async def send_streaming_message(self, params: dict[str, Any],
                                     caller: Caller) -> AsyncIterator[StreamEvent]:
        request, record = self._send(params, caller)
        configuration = request.configuration
        history = configuration.history_length if configuration else None
        return TaskEventStream(self._store, record, history, until_interrupted=True)

    def _send(self, params: dict[str, Any],
              caller: Caller) -> tuple[SendMessageRequest, TaskRecord]:
        request = send_message_request(params)
        message = {key: value for key, value in request.message.wire().items()
                   if value is not None}
        record = self._store.send(message, caller, request.metadata)
        return request, record

    async def get_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        # The polling hot path: the plain shapes are checked by hand, anything else gets
        # the model's validation (and its error that names the field).
        task_id = params.get("id")
        history = params.get("historyLength")
        if not (type(task_id) is str and task_id and len(task_id) <= IDENTIFIER_LIMIT
                and (history is None or (type(history) is int and history >= 0))
                and params.keys() <= _GET_TASK_KEYS):
            request = validate_params(GetTaskRequest, params)
            task_id, history = request.id, request.history_length
        record = self._store.visible(task_id, caller)
        record.revealed = True
        return record.snapshot(history)

    async def cancel_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request = validate_params(CancelTaskRequest, params)
        record = self._store.visible(request.id, caller)
        self._store.cancel(record)
        record.revealed = True
        return record.snapshot()

    async def list_tasks(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        return self._store.list_tasks(caller, validate_params(ListTasksRequest, params))

    async def subscribe_to_task(self, params: dict[str, Any],
                                caller: Caller) -> AsyncIterator[StreamEvent]:
        request = validate_params(SubscribeToTaskRequest, params)
        record = self._store.visible(request.id, caller)
        if record.terminal:
            raise RpcError("UNSUPPORTED_OPERATION",
                           f"the task has ended ({record.state}); read it with GetTask")
        return TaskEventStream(self._store, record, None, until_interrupted=False)

class TaskEventStream:
    """The Task as it is when the stream opens, then every change to it, until it ends
    (or, for SendStreamingMessage, until it awaits input or auth).

    Subscribing and taking the first snapshot happen in one synchronous step when the
    request is accepted, before the agent can run: every later change is in the queue,
    and none is both in the snapshot and the queue.
    """

    def __init__(self, store: TaskStore, record: TaskRecord, history: int | None, *,
                 until_interrupted: bool) -> None:
        self._store = store
        self._record = record
        self._until_interrupted = until_interrupted
        self._queue = store.subscribe(record)
        self._first: StreamEvent | None = {"task": record.snapshot(history)}
        self._done = self._ends(record.state)

    def _ends(self, state: str) -> bool:
        return state in TERMINAL_STATES or (
            self._until_interrupted and state in INTERRUPTED_STATES)

    def __aiter__(self) -> TaskEventStream:
        return self

    async def __anext__(self) -> StreamEvent:
        first = self._first
        if first is not None:
            self._first = None
            return first
        if self._done:
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is None:
            self._done = True
            raise StopAsyncIteration
        update = event.get("statusUpdate")
        if update is not None and self._ends(update["status"]["state"]):
            self._done = True
        return event

    async def aclose(self) -> None:
        self._done = True
        self._store.unsubscribe(self._record, self._queue)


def _operator_only(caller: Caller, method: str) -> None:
    if not acts_as_operator(caller):
        raise RpcError("METHOD_NOT_FOUND", f"{method} is served to the session's operator only")


def _unknown_method(method: str) -> RpcError:
    if method in PUSH_METHODS:
        return RpcError("PUSH_NOTIFICATION_NOT_SUPPORTED",
                        "this door sends no push notifications (capabilities.pushNotifications "
                        "is false)")
    if method == "GetExtendedAgentCard":
        return RpcError("UNSUPPORTED_OPERATION",
                        "this door has no extended agent card (capabilities.extendedAgentCard "
                        "is false)")
    return RpcError("METHOD_NOT_FOUND", f"no method {method[:64]!r} here")


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


def _followed_task(method: str, params: dict[str, Any]) -> str | None:
    """The task a stream follows, when the request names it: SubscribeToTask's ``id``,
    a SendStreamingMessage's ``message.taskId`` (a new task has none yet)."""
    if method == "SubscribeToTask":
        task_id = params.get("id")
    else:
        message = params.get("message")
        task_id = message.get("taskId") if isinstance(message, dict) else None
    return task_id if isinstance(task_id, str) and task_id else None
