"""The relay: a gateway member's door in front of its upstream A2A server
(docs/gateway.md). DoorAuth is unchanged in front; behind it, instead of the local
executor, :class:`RelayTasks`, in this order:

1. **What the door knows** (:class:`KnownTask`): the task a caller's new message
   started, recorded as that caller's when the upstream first names it in its answer (a
   result's task, a stream's Task, status or artifact events), with the last state and
   Task the door saw. One request records at most that one task (:class:`Claim`): any
   other id an answer names is ignored, and traced once per request
   (``upstream_task_ignored``), so an upstream cannot fill the door with tasks. Ended
   tasks are kept within the door's count and byte bounds, oldest forgotten first, as
   a local door keeps its own.
2. **Ownership**: ``GetTask``, ``CancelTask``, ``SubscribeToTask`` and a follow-up
   ``SendMessage`` for an id the caller does not own get the door's own ``-32001``,
   byte for byte what an unknown id gets, and never reach the upstream. The operator
   (and every caller of a public door) reaches every id, known or not.
3. **The gate**: a new task is refused with ``-32050`` before it is forwarded when the
   door's non-terminal tasks plus the new tasks in flight reach ``concurrency +
   queue_depth`` (``single``: after the first); push configurations are refused
   (``-32003``), never forwarded.
4. **Forwarding**: each method's params go as the caller sent them, with the door's own
   request id, ``A2A-Version: 1.0`` and the manifest's headers (:mod:`gateway.relay.client`);
   answers come back as the upstream gave them, streams event by event with the door's
   keep-alive; the upstream's own errors pass through, every other failure is ``-32603``
   naming the member.
5. **Following**: a task the door knows that has not ended is followed with ``GetTask``
   (every 0.2 s, backing off to 2 s) so that its state, the gate, the trace
   (``a2a_task_received``, ``task_state``, from what the door sees) and the ``--task``
   result stay true when nobody asks; at most ``concurrency + queue_depth`` followers
   at once. ``SubscribeToTask`` opens one upstream stream per task, shared by every
   local subscriber (:mod:`gateway.relay.fanout`); the upstream client keeps its streams and
   its calls in separate pools, so streams never take a call's connection.
6. **ListTasks** is the door's: the tasks it knows that the caller may see, filtered and
   paged as a local door pages (the same cursors), each page's tasks read fresh from the
   upstream.
7. **Wind-down**: the gate closes, every live task is cancelled in the upstream, and
   :meth:`RelayTasks.drained` waits for those cancels; the runtime ends the upstream's
   process afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.a2a.jsonrpc import RpcError, member_busy
from gateway.a2a.models import IDENTIFIER_LIMIT, ListTasksRequest
from gateway.auth.door_auth import AuthPolicy
from gateway.caller import Caller
from gateway.door.app import OPERATOR_CALLER, Door, DoorSettings
from gateway.door.card import CardInfo, CardRoute, merged_card
from gateway.door.jsonrpc_binding import JsonRpcEndpoint, send_message_request, validate_params
from gateway.door.streams import StreamBook
from gateway.door.tasks import (
    DEFAULT_PAGE_SIZE,
    TaskListeners,
    acts_as_operator,
    decode_cursor,
    encode_cursor,
    json_weight,
    new_id,
    parse_status_time,
)
from gateway.metrics import DoorMetrics
from gateway.protocol import TERMINAL_STATES, TaskState
from gateway.relay.client import UpstreamClient, UpstreamError
from gateway.relay.fanout import Fanout
from gateway.trace.bus import TraceBus, utc_timestamp
from gateway.trace.context import INCOMING_TRACEPARENT, Span, task_span, traceparent

log = logging.getLogger("murmur.relay")

#: How often a live task is read again: from FOLLOW_FIRST seconds, times FOLLOW_GROWTH
#: each time, up to FOLLOW_MOST.
FOLLOW_FIRST: Final = 0.2
FOLLOW_GROWTH: Final = 1.5
FOLLOW_MOST: Final = 2.0
_TASK_NOT_FOUND: Final = -32001

#: The span of the new task the request being handled is starting upstream, until the
#: upstream names the task (set by ``RelayTasks._new_task_span``; one request, one task).
_NEW_TASK_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "murmur_relay_task_span", default=None)


@dataclass(slots=True)
class KnownTask:
    """One task the upstream reported to a caller of this door."""

    id: str
    owner: str
    context_id: str
    state: str
    updated_ns: int
    #: The last Task the door saw of it (None until it saw one whole).
    snapshot: dict[str, Any] | None = None
    weight: int = 0
    #: Forgotten by the upstream (GetTask said -32001): no longer live, not followed.
    lost: bool = False
    #: Whether a ``task_state`` record was written for it yet.
    reported: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def live(self) -> bool:
        return not self.lost and self.state not in TERMINAL_STATES


def _task_id(params: dict[str, Any]) -> str:
    task_id = params.get("id")
    if not (type(task_id) is str and task_id and len(task_id) <= IDENTIFIER_LIMIT):
        raise RpcError("INVALID_PARAMS", f"id: a task id of 1 to {IDENTIFIER_LIMIT} "
                                         "characters is required")
    return task_id


@dataclass(slots=True)
class Claim:
    """What one request may record: the first task its answer names when it is a new
    message (``starts``), else nothing new; ``ignored`` counts the other ids named."""

    caller: Caller
    starts: bool
    task_id: str | None = None
    ignored: int = 0


class RelayTasks(TaskListeners):
    """The tasks of a gateway member (see the module docstring); a ``DoorTasks``."""

    def __init__(self, client: UpstreamClient, settings: DoorSettings, policy: AuthPolicy,
                 trace: TraceBus) -> None:
        super().__init__()
        self._client = client
        self._gate = settings.gate
        self._trace = trace
        self._max_finished = settings.max_finished_tasks
        self._max_finished_bytes = settings.max_finished_bytes
        self._tasks: dict[str, KnownTask] = {}
        self._finished: OrderedDict[str, int] = OrderedDict()
        self._finished_bytes = 0
        self._live = 0
        self._in_flight = 0
        self._accepted = 0
        self._ended = 0
        self._accepting = True
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._fanouts: dict[str, Fanout] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        self.endpoint: JsonRpcEndpoint = RelayEndpoint(self, trace, max_body=policy.max_body,
                                                       streams=settings.streams.book(),
                                                       stop=self.request_stop)

    # --- 1. what the door knows --------------------------------------------------------

    @property
    def held(self) -> int:
        """Live tasks plus new tasks on their way to the upstream."""
        return self._live + self._in_flight

    def state_counts(self) -> dict[str, int]:
        """The tasks the door knows (live and ended), by the last state it saw."""
        counts: dict[str, int] = {}
        for known in self._tasks.values():
            counts[known.state] = counts.get(known.state, 0) + 1
        return counts

    def known(self, task_id: str) -> KnownTask | None:
        return self._tasks.get(task_id)

    def _record(self, task_id: Any, context_id: Any, claim: Claim | None) -> KnownTask | None:
        """The task ``task_id`` as the door knows it; a new id is recorded as the
        claim's caller's (with ``a2a_task_received``) when the claim may still start
        one, else ignored."""
        if type(task_id) is not str or not task_id or len(task_id) > IDENTIFIER_LIMIT:
            return None
        known = self._tasks.get(task_id)
        if known is not None or claim is None:
            return known
        if not claim.starts or claim.task_id is not None:
            claim.ignored += 1
            if claim.ignored == 1:
                self._trace.emit("upstream_task_ignored", task_id=task_id,
                                 credential=claim.caller.credential.name,
                                 request_task=claim.task_id)
            return None
        claim.task_id = task_id
        caller = claim.caller
        context = context_id if type(context_id) is str else ""
        known = KnownTask(task_id, caller.credential.owner, context,
                          TaskState.SUBMITTED, time.time_ns())
        self._tasks[task_id] = known
        self._accepted += 1
        self._live += 1
        credential = caller.credential
        fields: dict[str, Any] = {"task_id": task_id, "context_id": context,
                                  "credential": credential.name, "origin": caller.origin,
                                  "trust": caller.trust}
        if credential.kind == "member":
            fields["formation_member"] = credential.member
        # The span sent upstream with the message that started it (its request's own
        # context), else a span of its own (a task the door first sees some other way).
        span = _NEW_TASK_SPAN.get() or task_span(INCOMING_TRACEPARENT.get())
        _NEW_TASK_SPAN.set(None)
        fields.update(span.fields())
        self._trace.emit("a2a_task_received", **fields)
        return known

    def _observe(self, known: KnownTask, state: Any, task: dict[str, Any] | None) -> None:
        """What the door saw of ``known``: a state, and maybe the whole Task. The first
        state seen, and each change after it, is a ``task_state`` record."""
        if task is not None:
            weight = json_weight(task)
            if known.id in self._finished:
                self._finished_bytes += weight - known.weight
                self._finished[known.id] = weight
            known.snapshot, known.weight = task, weight
        if not known.live:
            return
        if isinstance(state, str) and state and (state != known.state or not known.reported):
            known.reported = True
            if state != known.state:
                known.state = state
                known.updated_ns = time.time_ns()
            self._trace.emit("task_state", task_id=known.id, state=state)
            if state in TERMINAL_STATES:
                self._end(known)
                return
        self._follow(known)

    def _observe_task(self, task: Any, claim: Claim | None) -> None:
        """A Task in an answer: recorded under ``claim`` when new (None: only a task
        already known is updated)."""
        if not isinstance(task, dict):
            return
        known = self._record(task.get("id"), task.get("contextId"), claim)
        if known is not None:
            status = task.get("status")
            self._observe(known, status.get("state") if isinstance(status, dict) else None,
                          task)

    def _observe_event(self, event: Any, claim: Claim | None) -> None:
        """One StreamResponse (or a SendMessage result: ``task`` or ``message``)."""
        if not isinstance(event, dict):
            return
        if "task" in event:
            self._observe_task(event["task"], claim)
            return
        for key in ("statusUpdate", "artifactUpdate", "message"):
            body = event.get(key)
            if not isinstance(body, dict):
                continue
            known = self._record(body.get("taskId"), body.get("contextId"), claim)
            if known is not None and key == "statusUpdate":
                status = body.get("status")
                self._observe(known, status.get("state") if isinstance(status, dict)
                              else None, None)
            return

    def _end(self, known: KnownTask) -> None:
        self._live -= 1
        self._ended += 1
        follower = self._followers.pop(known.id, None)
        if follower is not None and follower is not asyncio.current_task():
            follower.cancel()
        if self._gate.after_task == "exit":
            self._accepting = False
        self._remember_finished(known)
        status = (known.snapshot or {}).get("status")
        if isinstance(status, dict) and status.get("state") == known.state:
            self._finish(known)  # the final Task is in hand
        else:
            asyncio.get_running_loop().create_task(self._settle(known),
                                                   name=f"murmur-relay-end-{known.id}")
        self._after_task()

    async def _settle(self, known: KnownTask) -> None:
        """The whole final Task, read once when the door saw only its state."""
        with contextlib.suppress(RpcError):
            task = await self._client.call("GetTask", {"id": known.id})
            if isinstance(task, dict):
                known.snapshot = task
        self._finish(known)

    def _finish(self, known: KnownTask) -> None:
        """The task-end listeners, then whoever waits for the task's result."""
        self.tell_task_end(known.snapshot or self._bare_task(known))
        known.ended.set()

    @staticmethod
    def _bare_task(known: KnownTask) -> dict[str, Any]:
        return {"id": known.id, "contextId": known.context_id,
                "status": {"state": known.state, "timestamp": utc_timestamp()}}

    def _lose(self, known: KnownTask) -> None:
        """The upstream forgot a live task: it holds no place in the gate any more."""
        if known.live:
            known.lost = True
            self._live -= 1
            self._remember_finished(known)  # kept within the bounds, then forgotten
            known.ended.set()
            self._after_task()

    def _after_task(self) -> None:
        if self._gate.after_task == "exit" and self._ended >= 1:
            self._accepting = False
            if self.held == 0:
                self.request_stop("after_task")

    def _remember_finished(self, known: KnownTask) -> None:
        if known.id in self._finished:
            return
        self._finished[known.id] = known.weight
        self._finished_bytes += known.weight
        while len(self._finished) > 1 and (len(self._finished) > self._max_finished
                                           or self._finished_bytes > self._max_finished_bytes):
            oldest, weight = self._finished.popitem(last=False)
            self._finished_bytes -= weight
            self._tasks.pop(oldest, None)

    # --- 2. ownership ------------------------------------------------------------------

    def reach(self, task_id: str, caller: Caller) -> KnownTask | None:
        """The known task ``task_id`` when ``caller`` may reach it; None for an id the
        door does not know that the operator asks for; else the door's ``-32001``."""
        known = self._tasks.get(task_id)
        if acts_as_operator(caller):
            return known
        if known is None or known.owner != caller.credential.owner:
            raise RpcError("TASK_NOT_FOUND")
        return known

    # --- 3. the gate -------------------------------------------------------------------

    def admit(self) -> None:
        """Take a place for a new task, or refuse it with ``-32050``."""
        gate = self._gate
        if (not self._accepting or self.held >= gate.holds
                or (gate.task_acceptance == "single" and self._accepted + self._in_flight >= 1)):
            raise member_busy(gate.retry_after_ms)
        self._in_flight += 1

    def release(self) -> None:
        self._in_flight -= 1
        self._after_task()

    # --- 4. forwarding -----------------------------------------------------------------

    async def send(self, params: dict[str, Any], caller: Caller) -> Any:
        """SendMessage: a follow-up of an owned task, or a new task through the gate."""
        new = self._check_send(params, caller)
        claim = Claim(caller, starts=new)
        if not new:
            result = await self._client.call("SendMessage", params)
            self._observe_event(result, claim)
            return result
        self.admit()
        try:
            result = await self._client.call("SendMessage", params,
                                             trace_parent=self._new_task_span())
            self._observe_event(result, claim)
        finally:
            _NEW_TASK_SPAN.set(None)      # no task named: the span goes with the request
            self.release()
        return result

    async def send_streaming(self, params: dict[str, Any],
                             caller: Caller) -> AsyncIterator[Any]:
        new = self._check_send(params, caller)
        if not new:
            return self._observed(await self._client.stream("SendStreamingMessage", params),
                                  Claim(caller, starts=False))
        self.admit()
        try:
            events = await self._client.stream("SendStreamingMessage", params,
                                               trace_parent=self._new_task_span())
        except BaseException:
            _NEW_TASK_SPAN.set(None)
            self.release()
            raise
        return self._observed(events, Claim(caller, starts=True), holding=True)

    def _new_task_span(self) -> bytes:
        """The span of the task a new message is about to start upstream: its
        ``traceparent`` goes with the request (the upstream's spans are its children),
        and ``a2a_task_received`` records it once the upstream names the task."""
        span = task_span(INCOMING_TRACEPARENT.get())
        _NEW_TASK_SPAN.set(span)
        return traceparent(span)

    async def _observed(self, events: AsyncIterator[Any], claim: Claim | None, *,
                        holding: bool = False) -> AsyncIterator[Any]:
        """``events`` as they come, each observed first; a place taken at the gate is
        given back once the first event has named the task (or the stream ends)."""
        try:
            async for event in events:
                self._observe_event(event, claim)
                if holding:
                    holding = False
                    self.release()
                yield event
        finally:
            _NEW_TASK_SPAN.set(None)
            if holding:
                self.release()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _check_send(self, params: dict[str, Any], caller: Caller) -> bool:
        """Validate a SendMessage; whether it starts a new task (a follow-up's task
        must be the caller's)."""
        request = send_message_request(params)
        task_id = request.message.task_id
        if task_id:
            self.reach(task_id, caller)
            return False
        return True

    async def get(self, params: dict[str, Any], caller: Caller) -> Any:
        known = self.reach(_task_id(params), caller)
        task = await self._client.call("GetTask", params)
        if known is not None:
            self._observe_task(task, None)
        return task

    async def cancel_task(self, params: dict[str, Any], caller: Caller) -> Any:
        known = self.reach(_task_id(params), caller)
        task = await self._client.call("CancelTask", params)
        if known is not None:
            self._observe_task(task, None)
        return task

    async def subscribe(self, params: dict[str, Any], caller: Caller) -> AsyncIterator[Any]:
        """The task's one upstream subscription, opened by its first subscriber and
        shared with every later one (:mod:`gateway.relay.fanout`)."""
        task_id = _task_id(params)
        self.reach(task_id, caller)
        fanout = self._fanouts.get(task_id)
        if fanout is not None and not fanout.closed:
            async def now() -> dict[str, Any]:
                return {"task": await self._client.call("GetTask", {"id": task_id})}

            return fanout.join(first=now)
        upstream = await self._client.stream("SubscribeToTask", {"id": task_id})
        fanout = Fanout(upstream, on_event=lambda event: self._observe_event(event, None),
                        on_close=lambda closed: self._forget_fanout(task_id, closed))
        self._fanouts[task_id] = fanout
        return fanout.join()

    def _forget_fanout(self, task_id: str, fanout: Fanout) -> None:
        if self._fanouts.get(task_id) is fanout:
            del self._fanouts[task_id]

    # --- 5. following ------------------------------------------------------------------

    def _follow(self, known: KnownTask) -> None:
        if known.id in self._followers or not known.live:
            return
        if len(self._followers) >= self._gate.holds:
            return  # bounded by the gate; the others are read when asked
        self._followers[known.id] = asyncio.get_running_loop().create_task(
            self._follower(known), name=f"murmur-relay-follow-{known.id}")

    async def _follower(self, known: KnownTask) -> None:
        delay = FOLLOW_FIRST
        try:
            while known.live:
                await asyncio.sleep(delay)
                delay = min(FOLLOW_MOST, delay * FOLLOW_GROWTH)
                try:
                    task = await self._client.call("GetTask", {"id": known.id,
                                                               "historyLength": 0})
                except UpstreamError as exc:
                    if exc.code == _TASK_NOT_FOUND:
                        self._lose(known)
                        return
                    continue
                except RpcError:
                    continue  # the upstream is down for now; the runtime watches it
                self._observe_task(task, None)
        finally:
            if self._followers.get(known.id) is asyncio.current_task():
                del self._followers[known.id]

    # --- 6. ListTasks ------------------------------------------------------------------

    async def list_tasks(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        request: ListTasksRequest = validate_params(ListTasksRequest, params)
        after_ns = parse_status_time(request.status_timestamp_after)
        operator = acts_as_operator(caller)
        owner = caller.credential.owner
        chosen = [known for known in self._tasks.values()
                  if (operator or known.owner == owner) and not known.lost
                  and (not request.context_id or known.context_id == request.context_id)
                  and (request.status is None or known.state == request.status)
                  and (after_ns is None or known.updated_ns >= after_ns)]
        chosen.sort(key=lambda known: (known.updated_ns, known.id), reverse=True)
        page_size = request.page_size or DEFAULT_PAGE_SIZE
        start = 0
        if request.page_token:
            cursor = decode_cursor(request.page_token)
            while start < len(chosen) and (chosen[start].updated_ns, chosen[start].id) >= cursor:
                start += 1
        page = chosen[start:start + page_size]
        more = start + page_size < len(chosen)
        tasks = await asyncio.gather(*(self._fresh(known, request) for known in page))
        next_token = encode_cursor(page[-1].updated_ns, page[-1].id) if more and page else ""
        return {"tasks": [task for task in tasks if task is not None],
                "nextPageToken": next_token, "pageSize": page_size,
                "totalSize": len(chosen)}

    async def _fresh(self, known: KnownTask, request: ListTasksRequest) -> dict[str, Any] | None:
        params: dict[str, Any] = {"id": known.id}
        if request.history_length is not None:
            params["historyLength"] = request.history_length
        try:
            task = await self._client.call("GetTask", params)
        except UpstreamError as exc:
            if exc.code == _TASK_NOT_FOUND:
                self._lose(known)
                return None
            raise
        if not isinstance(task, dict):
            return None
        if not request.include_artifacts:
            task = {key: value for key, value in task.items() if key != "artifacts"}
        return task

    # --- the runtime's handles ---------------------------------------------------------

    async def submit(self, text: str, caller: Caller) -> str:
        """A task from the runtime itself (``mur run --task``), started in the upstream
        as any caller's would be; returns its id."""
        message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
        result = await self.send({"message": message,
                                  "configuration": {"returnImmediately": True}}, caller)
        task = result.get("task") if isinstance(result, dict) else None
        if isinstance(task, dict) and isinstance(task.get("id"), str):
            return str(task["id"])
        # Answered with a Message alone: the task ended in its answer; keep it as one.
        reply = result.get("message") if isinstance(result, dict) else None
        task_id = new_id()
        known = self._record(task_id, (reply or {}).get("contextId"),
                             Claim(caller, starts=True))
        assert known is not None
        final = {"id": task_id, "contextId": known.context_id,
                 "status": {"state": TaskState.COMPLETED, "message": reply,
                            "timestamp": utc_timestamp()}}
        self._observe(known, TaskState.COMPLETED, final)
        return task_id

    def task(self, task_id: str) -> dict[str, Any]:
        known = self._tasks.get(task_id)
        if known is None:
            raise RpcError("TASK_NOT_FOUND")
        return known.snapshot or self._bare_task(known)

    async def result(self, task_id: str) -> dict[str, Any]:
        known = self._tasks.get(task_id)
        if known is None:
            raise RpcError("TASK_NOT_FOUND")
        await known.ended.wait()
        return self.task(task_id)

    def cancel(self, task_id: str, reason: str | None) -> None:
        known = self._tasks.get(task_id)
        if known is None:
            raise RpcError("TASK_NOT_FOUND")
        if not known.live:
            raise RpcError("TASK_NOT_CANCELABLE", f"the task has already ended ({known.state})")
        self._cancel_upstream(known)

    def _cancel_upstream(self, known: KnownTask) -> None:
        async def cancel() -> None:
            with contextlib.suppress(RpcError):
                task = await self._client.call("CancelTask", {"id": known.id})
                self._observe_task(task, None)

        job = asyncio.get_running_loop().create_task(cancel(), name="murmur-relay-cancel")
        self._cancels.add(job)
        job.add_done_callback(self._cancels.discard)

    # --- 7. wind-down ------------------------------------------------------------------

    def close_gate(self) -> None:
        self._accepting = False

    def refuse_queued(self, reason: str) -> int:
        return 0  # the door queues nothing: the upstream holds every task it took

    def cancel_running(self, reason: str) -> int:
        live = [known for known in self._tasks.values() if known.live]
        for known in live:
            self._cancel_upstream(known)
        return len(live)

    async def drained(self) -> None:
        if self._cancels:
            await asyncio.wait(list(self._cancels))

    async def aclose(self) -> None:
        for follower in list(self._followers.values()):
            follower.cancel()
        await asyncio.gather(*self._followers.values(), return_exceptions=True)
        await self._client.aclose()


class RelayEndpoint(JsonRpcEndpoint):
    """The JSON-RPC endpoint of a gateway member: the door's framing and order of checks
    (:class:`gateway.door.jsonrpc_binding.JsonRpcEndpoint`), each A2A method relayed by
    ``tasks``."""

    def __init__(self, tasks: RelayTasks, trace: TraceBus, *, max_body: int,
                 stop: Callable[[str], None], keepalive: float | None = None,
                 streams: StreamBook | None = None) -> None:
        super().__init__(trace, max_body=max_body, stop=stop, keepalive=keepalive,
                         streams=streams)
        self._unary.update({
            "SendMessage": tasks.send,
            "GetTask": tasks.get,
            "CancelTask": tasks.cancel_task,
            "ListTasks": tasks.list_tasks,
        })
        self._streaming.update({
            "SendStreamingMessage": tasks.send_streaming,
            "SubscribeToTask": tasks.subscribe,
        })


def build_gateway_door(client: UpstreamClient, upstream_card: dict[str, Any],
                       settings: DoorSettings, *, policy: AuthPolicy | None = None,
                       trace: TraceBus | None = None,
                       metrics: DoorMetrics | None = None) -> Door:
    """A gateway member's door: DoorAuth, the card merged from ``upstream_card`` and
    ``settings.card``, and the relay to ``client``'s upstream."""
    policy = policy if policy is not None else AuthPolicy()
    trace = trace if trace is not None else TraceBus()

    def build(info: CardInfo, authenticated: bool) -> dict[str, Any]:
        return merged_card(upstream_card, info, authenticated=authenticated)

    card = CardRoute(settings.card, authenticated=policy.authenticated, build=build)
    return Door(RelayTasks(client, settings, policy, trace), settings, policy, trace, card,
                metrics)


__all__ = ["OPERATOR_CALLER", "KnownTask", "RelayEndpoint", "RelayTasks",
           "build_gateway_door"]
