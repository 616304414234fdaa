"""The A2A methods of a door whose agent runs here: :class:`LocalMethods`, each method
over the door's :class:`gateway.door.tasks.TaskStore`, and :class:`TaskEventStream`, what
a stream of one task sends.

In this order: SendMessage (blocking unless ``returnImmediately``; a task answered with
a Message alone is not kept when nobody saw it) and SendStreamingMessage, GetTask (the
polling hot path, its plain shapes checked by hand), CancelTask, ListTasks,
SubscribeToTask; then the stream: the Task as it is when the stream opens, then every
change, until it ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import (
    IDENTIFIER_LIMIT,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from gateway.caller import Caller
from gateway.door.approvals import Approvals
from gateway.door.methods import A2AMethods, send_message_request, validate_params
from gateway.door.streams import StreamBook
from gateway.door.task_record import StreamEvent, TaskRecord
from gateway.door.tasks import TaskStore
from gateway.protocol import INTERRUPTED_STATES, TERMINAL_STATES
from gateway.push.notifications import PushNotifications
from gateway.trace.bus import TraceBus

__all__ = ["LocalMethods", "TaskEventStream"]

_GET_TASK_KEYS = frozenset({"id", "historyLength", "tenant"})


class LocalMethods(A2AMethods):
    """The A2A methods of a door whose tasks run here, in ``store``."""

    def __init__(self, store: TaskStore, trace: TraceBus, *, stop: Callable[[str], None],
                 streams: StreamBook | None = None,
                 push: PushNotifications | None = None) -> None:
        super().__init__(trace, stop=stop, streams=streams)
        self._store = store
        self._push = push
        if push is not None:   # the four configuration methods, served here
            self._unary.update({
                "CreateTaskPushNotificationConfig": push.create,
                "GetTaskPushNotificationConfig": push.get,
                "ListTaskPushNotificationConfigs": push.list,
                "DeleteTaskPushNotificationConfig": push.delete,
            })

    def _approvals(self) -> Approvals:
        return self._store.approvals

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
        request = send_message_request(params, self.accepted, push=self._push is not None)
        message = {key: value for key, value in request.message.wire().items()
                   if value is not None}
        configuration = request.configuration
        push = configuration.task_push_notification_config if configuration else None
        if push is not None and self._push is not None:
            # Read before the task is made: a configuration refused starts nothing.
            self._push.check(push, caller)
        record = self._store.send(message, caller, request.metadata)
        if push is not None and self._push is not None:
            self._push.watch(record, push, caller)   # before the agent can run
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
