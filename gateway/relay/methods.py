"""The A2A methods of a gateway member: :class:`RelayMethods`, each relayed by its
upstream client, with what the door knows kept by :class:`gateway.relay.tasks.RelayTasks`
(docs/gateway.md). The door's bindings frame them as for a local door.

In this order (the relay's steps 2-6, as :mod:`gateway.relay.tasks` numbers them):
SendMessage and SendStreamingMessage (a message whose parts the upstream's card does not
accept refused before anything is forwarded, then a follow-up of an owned task, or a new
task through the gate, with its span), the stream observed event by event and begun
with the Task (:mod:`gateway.relay.opening`); GetTask and CancelTask (ownership first);
SubscribeToTask (a task that has ended answered by the door itself, else one upstream
subscription per task, shared: :mod:`gateway.relay.fanout`, begun with the Task too);
ListTasks (the door's own list, each page's tasks read fresh from the upstream). Last,
the history of an answered task is kept within the caller's ``historyLength``, whatever
the upstream did with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import ListTasksRequest
from gateway.caller import Caller
from gateway.door.listing import page_of
from gateway.door.methods import A2AMethods, send_message_request, validate_params
from gateway.door.streams import StreamBook
from gateway.protocol import TERMINAL_STATES
from gateway.relay.client import UpstreamClient, UpstreamError
from gateway.relay.fanout import Fanout
from gateway.relay.known import TASK_NOT_FOUND, Claim, KnownTask, task_id_of
from gateway.relay.opening import opening_task
from gateway.trace.bus import TraceBus

if TYPE_CHECKING:  # RelayTasks builds these methods over itself
    from gateway.relay.tasks import RelayTasks

__all__ = ["RelayMethods"]


class RelayMethods(A2AMethods):
    """The A2A methods of a gateway member (:class:`gateway.door.methods.A2AMethods`),
    relayed by ``client`` over what ``tasks`` knows."""

    def __init__(self, tasks: RelayTasks, client: UpstreamClient, trace: TraceBus, *,
                 stop: Callable[[str], None], streams: StreamBook | None = None) -> None:
        super().__init__(trace, stop=stop, streams=streams)
        self._tasks = tasks
        self._client = client
        self._fanouts: dict[str, Fanout] = {}

    async def send_message(self, params: dict[str, Any], caller: Caller) -> Any:
        """SendMessage: a follow-up of an owned task, or a new task through the gate."""
        new = self._check_send(params, caller)
        claim = Claim(caller, starts=new)
        configuration = params.get("configuration")
        length = configuration.get("historyLength") if isinstance(configuration, dict) else None
        if not new:
            result = await self._client.call("SendMessage", params)
            self._tasks.observe_event(result, claim)
            return _with_history(result, length)
        self._tasks.admit()
        try:
            result = await self._client.call("SendMessage", params,
                                             trace_parent=self._tasks.new_task_span())
            self._tasks.observe_event(result, claim)
        finally:
            self._tasks.drop_new_task_span()
            self._tasks.release()
        return _with_history(result, length)

    async def send_streaming_message(self, params: dict[str, Any],
                                     caller: Caller) -> AsyncIterator[Any]:
        new = self._check_send(params, caller)
        if not new:
            return self._observed(await self._client.stream("SendStreamingMessage", params),
                                  Claim(caller, starts=False), params)
        self._tasks.admit()
        try:
            events = await self._client.stream("SendStreamingMessage", params,
                                               trace_parent=self._tasks.new_task_span())
        except BaseException:
            self._tasks.drop_new_task_span()
            self._tasks.release()
            raise
        return self._observed(events, Claim(caller, starts=True), params, holding=True)

    async def _observed(self, events: AsyncIterator[Any], claim: Claim | None,
                        params: dict[str, Any], *,
                        holding: bool = False) -> AsyncIterator[Any]:
        """``events`` as they come, each observed first; a place taken at the gate is
        given back once the first event has named the task (or the stream ends). A
        first event that is not the Task (an A2A 0.3 upstream's status update) is
        preceded by the Task (:func:`gateway.relay.opening.opening_task`)."""
        first = True
        try:
            async for event in events:
                self._tasks.observe_event(event, claim)
                if first:
                    first = False
                    if holding:
                        holding = False
                        self._tasks.release()
                    opening = self._opening(event, params)
                    if opening is not None:
                        yield opening
                yield event
        finally:
            self._tasks.drop_new_task_span()
            if holding:
                self._tasks.release()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _opening(self, event: Any, params: dict[str, Any]) -> dict[str, Any] | None:
        """The Task a send stream begins with when its first event, ``event``, is an
        update (None for a Task or a Message, as nearly every upstream sends)."""
        configuration = params.get("configuration")
        return opening_task(event, self._tasks.known, message=params.get("message"),
                            history_length=configuration.get("historyLength")
                            if isinstance(configuration, dict) else None)

    def _check_send(self, params: dict[str, Any], caller: Caller) -> bool:
        """Validate a SendMessage; whether it starts a new task (a follow-up's task
        must be the caller's)."""
        request = send_message_request(params, self.accepted)
        task_id = request.message.task_id
        if task_id:
            self._tasks.reach(task_id, caller)
            return False
        return True

    async def get_task(self, params: dict[str, Any], caller: Caller) -> Any:
        known = self._tasks.reach(task_id_of(params), caller)
        task = await self._client.call("GetTask", params)
        if known is not None:
            self._tasks.observe_task(task, None)
        return _within(task, params.get("historyLength"))

    async def cancel_task(self, params: dict[str, Any], caller: Caller) -> Any:
        known = self._tasks.reach(task_id_of(params), caller)
        task = await self._client.call("CancelTask", params)
        if known is not None:
            self._tasks.observe_task(task, None)
        return task

    async def subscribe_to_task(self, params: dict[str, Any], caller: Caller) -> AsyncIterator[Any]:
        """The task's one upstream subscription, opened by its first subscriber and
        shared with every later one (:mod:`gateway.relay.fanout`); a task that has
        ended is the door's own ``-32004``."""
        task_id = task_id_of(params)
        known = self._tasks.reach(task_id, caller)
        fanout = self._fanouts.get(task_id)
        seen: Any = None
        if fanout is None or fanout.closed:
            seen = await self._refuse_ended(task_id, known)
            fanout = self._fanouts.get(task_id)  # another subscriber's, opened meanwhile
        if fanout is not None and not fanout.closed:
            async def now() -> dict[str, Any]:
                return {"task": await self._client.call("GetTask", {"id": task_id})}

            return fanout.join(first=now)
        upstream = await self._client.stream("SubscribeToTask", {"id": task_id})
        fanout = Fanout(upstream, on_event=lambda event: self._tasks.observe_event(event, None),
                        on_close=lambda closed: self._forget_fanout(task_id, closed))
        self._fanouts[task_id] = fanout
        # The upstream's first event is this subscriber's first: a Task, or (an A2A 0.3
        # upstream's update) preceded by one made from it and the Task read just now.
        return fanout.join(opening=lambda event: opening_task(event, self._tasks.known,
                                                              seen=seen))

    async def _refuse_ended(self, task_id: str, known: KnownTask | None) -> Any:
        """A task that has ended is not subscribed to upstream: A2A answers that with
        ``-32004``, and an a2a-sdk upstream logs a warning for each, so every call that
        ended before its caller subscribed (call_member's usual case) would print one.
        The door answers it as a local door does, from the state it saw or one GetTask
        (a task ending between that GetTask and the subscription still reaches the
        upstream, which answers it the same way). Returns the Task that GetTask read,
        if any."""
        state = known.state if known is not None else None
        task: Any = None
        if state not in TERMINAL_STATES:
            task = await self._client.call("GetTask", {"id": task_id})
            if known is not None:
                self._tasks.observe_task(task, None)
            status = task.get("status") if isinstance(task, dict) else None
            state = status.get("state") if isinstance(status, dict) else None
        if state in TERMINAL_STATES:
            raise RpcError("UNSUPPORTED_OPERATION",
                           f"the task has ended ({state}); read it with GetTask")
        return task

    def _forget_fanout(self, task_id: str, fanout: Fanout) -> None:
        if self._fanouts.get(task_id) is fanout:
            del self._fanouts[task_id]

    async def list_tasks(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request: ListTasksRequest = validate_params(ListTasksRequest, params)
        page = page_of(self._tasks.visible(caller), request)
        tasks = await asyncio.gather(*(self._fresh(known, request) for known in page.tasks))
        return {"tasks": [task for task in tasks if task is not None],
                "nextPageToken": page.next_token, "pageSize": page.page_size,
                "totalSize": page.total}

    async def _fresh(self, known: KnownTask, request: ListTasksRequest) -> dict[str, Any] | None:
        params: dict[str, Any] = {"id": known.id}
        if request.history_length is not None:
            params["historyLength"] = request.history_length
        try:
            task = await self._client.call("GetTask", params)
        except UpstreamError as exc:
            if exc.code == TASK_NOT_FOUND:
                self._tasks.lose(known)
                return None
            raise
        if not isinstance(task, dict):
            return None
        kept: dict[str, Any] = _within(task, request.history_length)
        if not request.include_artifacts:
            kept = {key: value for key, value in kept.items() if key != "artifacts"}
        return kept


def _with_history(result: Any, length: Any) -> Any:
    """A SendMessage result whose task keeps at most ``length`` messages of history."""
    if isinstance(result, dict) and isinstance(result.get("task"), dict):
        trimmed = _within(result["task"], length)
        if trimmed is not result["task"]:
            return {**result, "task": trimmed}
    return result


def _within(task: Any, length: Any) -> Any:
    """``task`` with at most its last ``length`` history messages: the caller's
    ``historyLength``, kept by the door whether or not the upstream kept it (A2A 0.3
    servers, and some 1.0 ones, answer 0 with the whole history)."""
    if type(length) is not int or length < 0 or not isinstance(task, dict):
        return task
    history = task.get("history")
    if not isinstance(history, list) or len(history) <= length:
        return task
    if length == 0:
        return {key: value for key, value in task.items() if key != "history"}
    return {**task, "history": history[-length:]}
