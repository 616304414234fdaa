"""The door's JSON-RPC endpoint: A2A 1.0 methods plus ``murmur.WatchSession`` and
``murmur.StopSession``, dispatched to the task store.

Pure ASGI: the body is read once (or taken already parsed from the auth middleware's
``RPC_SCOPE_KEY``), answered with one ``json.dumps``; streams are Server-Sent Events that
end when the task does, or when the client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, ValidationError

from gateway.a2a import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from gateway.caller import RPC_SCOPE_KEY, Caller, caller_of
from gateway.http_io import BodyTooLarge, header, read_body, send_json, wait_disconnect
from gateway.jsonrpc import (
    SSE_HEADERS,
    RequestError,
    RequestId,
    RpcError,
    encode_error,
    encode_result,
    invalid_params,
    parse_body,
    parse_request,
    sse_error,
    sse_result,
)
from gateway.protocol import A2A_VERSION, INTERRUPTED_STATES, TERMINAL_STATES, VERSION_HEADER
from gateway.tasks import StreamEvent, TaskRecord, TaskStore, acts_as_operator
from gateway.trace_bus import TraceBus
from gateway.types import Receive, Scope, Send

log = logging.getLogger("murmur.door")

SUPPORTED_VERSION = tuple(int(part) for part in A2A_VERSION.split("."))
_VERSION_HEADER_BYTES = VERSION_HEADER.encode("ascii")
#: What a request without ``A2A-Version`` means (A2A 1.0 section 3.6.2).
VERSION_WHEN_ABSENT = "0.3"
PUSH_METHODS = frozenset({
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig",
})

_GET_TASK_KEYS = frozenset({"id", "historyLength", "tenant"})

Unary = Callable[[dict[str, Any], Caller], Awaitable[Any]]
Streaming = Callable[[dict[str, Any], Caller], Awaitable[AsyncIterator[Any]]]


M = TypeVar("M", bound=BaseModel)


def _validate(model: type[M], params: dict[str, Any]) -> M:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise invalid_params(exc) from exc


class RpcEndpoint:
    """``POST /``: one JSON-RPC request per HTTP request."""

    def __init__(self, store: TaskStore, trace: TraceBus, *, max_body: int,
                 stop: Callable[[str], None]) -> None:
        self._store = store
        self._trace = trace
        self._max_body = max_body
        self._stop = stop
        self._unary: dict[str, Unary] = {
            "SendMessage": self.send_message,
            "GetTask": self.get_task,
            "CancelTask": self.cancel_task,
            "ListTasks": self.list_tasks,
            "murmur.StopSession": self.stop_session,
        }
        self._streaming: dict[str, Streaming] = {
            "SendStreamingMessage": self.send_streaming_message,
            "SubscribeToTask": self.subscribe_to_task,
            "murmur.WatchSession": self.watch_session,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id: RequestId = None
        status = 200
        try:
            value = scope.get(RPC_SCOPE_KEY)
            if value is None:
                value = parse_body(await read_body(receive, self._max_body))
            request = parse_request(value)
            request_id = request.id
            unary = self._unary.get(request.method)
            streaming = None if unary is not None else self._streaming.get(request.method)
            if unary is None and streaming is None:
                raise _unknown_method(request.method)
            _check_version(scope)
            caller = caller_of(scope)
            if streaming is not None:
                events = await streaming(request.params, caller)
                await _stream(receive, send, request_id, events)
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
            log.exception("JSON-RPC request %r failed", request_id)
            answer = encode_error(request_id, RpcError("INTERNAL_ERROR"))
        await send_json(send, status, answer)

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
        request = _validate(SendMessageRequest, params)
        configuration = request.configuration
        if configuration is not None and configuration.task_push_notification_config:
            raise RpcError("PUSH_NOTIFICATION_NOT_SUPPORTED",
                           "this door sends no push notifications; follow the task with "
                           "SubscribeToTask or GetTask")
        message = {key: value for key, value in request.message.wire().items()
                   if value is not None}
        record = self._store.send(message, caller, request.metadata)
        return request, record

    async def get_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        # The polling hot path: the plain shapes are checked by hand, anything else gets
        # the model's validation (and its error that names the field).
        task_id = params.get("id")
        history = params.get("historyLength")
        if not (type(task_id) is str and task_id
                and (history is None or (type(history) is int and history >= 0))
                and params.keys() <= _GET_TASK_KEYS):
            request = _validate(GetTaskRequest, params)
            task_id, history = request.id, request.history_length
        record = self._store.visible(task_id, caller)
        record.revealed = True
        return record.snapshot(history)

    async def cancel_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request = _validate(CancelTaskRequest, params)
        record = self._store.visible(request.id, caller)
        self._store.cancel(record)
        record.revealed = True
        return record.snapshot()

    async def list_tasks(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        return self._store.list_tasks(caller, _validate(ListTasksRequest, params))

    async def subscribe_to_task(self, params: dict[str, Any],
                                caller: Caller) -> AsyncIterator[StreamEvent]:
        request = _validate(SubscribeToTaskRequest, params)
        record = self._store.visible(request.id, caller)
        if record.terminal:
            raise RpcError("UNSUPPORTED_OPERATION",
                           f"the task has ended ({record.state}); read it with GetTask")
        return TaskEventStream(self._store, record, None, until_interrupted=False)

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


def _check_version(scope: Scope) -> None:
    """A2A-Version from the header (or the query parameter the spec also allows)."""
    raw = header(scope, _VERSION_HEADER_BYTES)
    version = raw.decode("latin-1").strip() if raw is not None else ""
    if not version and scope.get("query_string"):
        query = bytes(scope["query_string"]).decode("latin-1")
        for key, value in parse_qsl(query):
            if key.lower() == VERSION_HEADER:
                version = value.strip()
                break
    if not version:
        raise RpcError(
            "VERSION_NOT_SUPPORTED",
            "a request without A2A-Version is A2A 0.3, which this door does not serve; "
            f"send the header A2A-Version: {A2A_VERSION}",
            metadata={"requestedVersion": VERSION_WHEN_ABSENT,
                      "supportedVersions": A2A_VERSION})
    parts = version.split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1])) if len(parts) in (2, 3) else None
        if len(parts) == 3:
            int(parts[2])
    except ValueError:
        major_minor = None
    if major_minor != SUPPORTED_VERSION:
        raise RpcError(
            "VERSION_NOT_SUPPORTED",
            f"A2A-Version {version[:16]!r} is not served here; "
            f"send A2A-Version: {A2A_VERSION}",
            metadata={"requestedVersion": version[:16], "supportedVersions": A2A_VERSION})


async def _stream(receive: Receive, send: Send, request_id: RequestId,
                  events: AsyncIterator[Any]) -> None:
    """Send ``events`` as SSE until they end or the client goes away."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def pump() -> None:
        try:
            async for result in events:
                await send({"type": "http.response.body", "body": sse_result(request_id, result),
                            "more_body": True})
                # Let the disconnect watcher run between events: a replayed backlog would
                # otherwise keep writing to a socket the client has closed.
                await asyncio.sleep(0)
                if watching.done():
                    return
        except RpcError as exc:
            await send({"type": "http.response.body", "body": sse_error(request_id, exc),
                        "more_body": True})
        except Exception:
            log.exception("stream %r failed", request_id)
            await send({"type": "http.response.body",
                        "body": sse_error(request_id, RpcError("INTERNAL_ERROR")),
                        "more_body": True})

    pumping = asyncio.ensure_future(pump())
    watching = asyncio.ensure_future(wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({pumping, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, watching):
            task.cancel()
        for task in (pumping, watching):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    if pumping in done:
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
