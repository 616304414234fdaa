"""The relay: a gateway member's door in front of its upstream A2A server
(docs/gateway.md). DoorAuth is unchanged in front; behind it, instead of the local
executor, :class:`RelayTasks`, in this order:

1. **What the door knows** (:class:`gateway.relay.known.KnownTask`): the task a caller's new message
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
4. **Forwarding** (:class:`gateway.relay.methods.RelayMethods`, the A2A methods the
   door's bindings frame): each method's params go as the caller sent them, with the door's own
   request id, ``A2A-Version: 1.0`` and the manifest's headers (:mod:`gateway.relay.client`);
   answers come back as the upstream gave them, streams event by event with the door's
   keep-alive, each begun with the Task (made by :mod:`gateway.relay.opening` where the
   upstream began with an update, as A2A 0.3 ones do); the upstream's own errors pass
   through, every other failure is ``-32603`` naming the member.
5. **Following**: a task the door knows that has not ended is followed with ``GetTask``
   (every 0.2 s, backing off to 2 s) so that its state, the gate, the trace
   (``a2a_task_received``, ``task_state``, from what the door sees) and the ``--task``
   result stay true when nobody asks; at most ``concurrency + queue_depth`` followers
   at once. ``SubscribeToTask`` opens one upstream stream per task, shared by every
   local subscriber (:mod:`gateway.relay.fanout`); the upstream client keeps its streams and
   its calls in separate pools, so streams never take a call's connection.
6. **ListTasks** (also in :mod:`gateway.relay.methods`) is the door's: the tasks it
   knows that the caller may see, filtered and paged as a local door pages (the same
   cursors, :mod:`gateway.door.listing`), each page's tasks read fresh from the
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
from typing import Any, Final

from gateway.a2a.jsonrpc import RpcError, member_busy
from gateway.a2a.models import IDENTIFIER_LIMIT
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.edge_limits import EDGE_CALL
from gateway.caller import Caller
from gateway.door.app import OPERATOR_CALLER, Door, DoorSettings
from gateway.door.card import CardInfo, CardRoute, merged_card
from gateway.door.methods import A2AMethods
from gateway.door.retention import FinishedTasks, json_weight
from gateway.door.task_listeners import TaskListeners
from gateway.door.task_record import new_id
from gateway.door.tasks import acts_as_operator
from gateway.metrics import DoorMetrics
from gateway.protocol import TERMINAL_STATES, TaskState
from gateway.relay.client import UpstreamClient, UpstreamError
from gateway.relay.known import TASK_NOT_FOUND, Claim, KnownTask
from gateway.relay.methods import RelayMethods
from gateway.trace.bus import TraceBus, utc_timestamp
from gateway.trace.context import INCOMING_TRACEPARENT, Span, task_span, traceparent

log = logging.getLogger("murmur.relay")

#: How often a live task is read again: from FOLLOW_FIRST seconds, times FOLLOW_GROWTH
#: each time, up to FOLLOW_MOST.
FOLLOW_FIRST: Final = 0.2
FOLLOW_GROWTH: Final = 1.5
FOLLOW_MOST: Final = 2.0

#: The span of the new task the request being handled is starting upstream, until the
#: upstream names the task (set by ``RelayTasks._new_task_span``; one request, one task).
_NEW_TASK_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "murmur_relay_task_span", default=None)


class RelayTasks(TaskListeners):
    """The tasks of a gateway member (see the module docstring); a ``DoorTasks``."""

    def __init__(self, client: UpstreamClient, settings: DoorSettings, trace: TraceBus) -> None:
        super().__init__()
        self._client = client
        self._gate = settings.gate
        self._trace = trace
        self._tasks: dict[str, KnownTask] = {}
        #: Ended tasks kept within the door's bounds, as a local door keeps its own.
        self._finished = FinishedTasks(settings.max_finished_tasks,
                                       settings.max_finished_bytes, self._forget)
        self._live = 0
        self._in_flight = 0
        self._accepted = 0
        self._ended = 0
        self._accepting = True
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        self._methods = RelayMethods(self, client, trace, streams=settings.streams.book(),
                                     stop=self.request_stop)
        #: The A2A methods over these tasks, relayed (gateway/relay/methods.py).
        self.methods: A2AMethods = self._methods

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
        edge = EDGE_CALL.get()
        if edge is not None:        # a member's call through the door's EdgeGuard
            known.edge, known.depth = edge, edge.depth
            edge.task_created()
        credential = caller.credential
        fields: dict[str, Any] = {"task_id": task_id, "context_id": context,
                                  "credential": credential.name, "origin": caller.origin,
                                  "trust": caller.trust}
        if credential.kind == "member":
            fields["formation_member"] = credential.member
            fields["depth"] = known.depth
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
            self._finished.reweigh(known.id, weight)
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

    def observe_task(self, task: Any, claim: Claim | None) -> None:
        """A Task in an answer: recorded under ``claim`` when new (None: only a task
        already known is updated)."""
        if not isinstance(task, dict):
            return
        known = self._record(task.get("id"), task.get("contextId"), claim)
        if known is not None:
            status = task.get("status")
            self._observe(known, status.get("state") if isinstance(status, dict) else None,
                          task)

    def observe_event(self, event: Any, claim: Claim | None) -> None:
        """One StreamResponse (or a SendMessage result: ``task`` or ``message``)."""
        if not isinstance(event, dict):
            return
        if "task" in event:
            self.observe_task(event["task"], claim)
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
        if known.edge is not None:
            known.edge.task_ended()
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

    def lose(self, known: KnownTask) -> None:
        """The upstream forgot a live task: it holds no place in the gate any more."""
        if known.live:
            known.lost = True
            self._live -= 1
            if known.edge is not None:
                known.edge.task_ended()
            self._remember_finished(known)  # kept within the bounds, then forgotten
            known.ended.set()
            self._after_task()

    def _after_task(self) -> None:
        if self._gate.after_task == "exit" and self._ended >= 1:
            self._accepting = False
            if self.held == 0:
                self.request_stop("after_task")

    def _remember_finished(self, known: KnownTask) -> None:
        self._finished.remember(known.id, known.weight)

    def _forget(self, task_id: str) -> None:
        """An ended task past the bounds: the door knows it no more (-32001)."""
        self._tasks.pop(task_id, None)

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

    # --- 4. forwarding (gateway/relay/methods.py): the new task's span -----------------

    @staticmethod
    def new_task_span() -> bytes:
        """The span of the task a new message is about to start upstream: its
        ``traceparent`` goes with the request (the upstream's spans are its children),
        and ``a2a_task_received`` records it once the upstream names the task."""
        span = task_span(INCOMING_TRACEPARENT.get())
        _NEW_TASK_SPAN.set(span)
        return traceparent(span)

    @staticmethod
    def drop_new_task_span() -> None:
        """The request named no task: its span goes with it."""
        _NEW_TASK_SPAN.set(None)

    def visible(self, caller: Caller) -> list[KnownTask]:
        """The known tasks ``caller`` may list (the operator: all), none forgotten upstream."""
        operator = acts_as_operator(caller)
        owner = caller.credential.owner
        return [known for known in self._tasks.values()
                if (operator or known.owner == owner) and not known.lost]

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
                    if exc.code == TASK_NOT_FOUND:
                        self.lose(known)
                        return
                    continue
                except RpcError:
                    continue  # the upstream is down for now; the runtime watches it
                if _is_terminal(task):
                    # The final Task whole, history too: an answer can be only there
                    # (docs/gateway.md, "The answer of a task").
                    with contextlib.suppress(RpcError):
                        task = await self._client.call("GetTask", {"id": known.id})
                self.observe_task(task, None)
        finally:
            if self._followers.get(known.id) is asyncio.current_task():
                del self._followers[known.id]

    # --- the runtime's handles ---------------------------------------------------------

    async def submit(self, text: str, caller: Caller) -> str:
        """A task from the runtime itself (``mur run --task``), started in the upstream
        as any caller's would be; returns its id."""
        message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
        result = await self._methods.send_message({"message": message,
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
                self.observe_task(task, None)

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


def _is_terminal(task: Any) -> bool:
    status = task.get("status") if isinstance(task, dict) else None
    return isinstance(status, dict) and status.get("state") in TERMINAL_STATES


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
    return Door(RelayTasks(client, settings, trace), settings, policy, trace, card,
                metrics)


__all__ = ["OPERATOR_CALLER", "RelayMethods", "RelayTasks",
           "build_gateway_door"]
