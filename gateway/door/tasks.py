"""The door's tasks: a store with per-caller visibility, the lifecycle gate, the executor.

* **Visibility.** Every task is owned by the credential that started it
  (``caller.credential.owner``: its name, and for a JWT the issuer's name and the
  token's ``sub``). A caller reaches only its own tasks; the operator reaches
  all. Anything else is the one ``-32001 Task not found`` an unknown id also gets.
* **The gate.** ``concurrency`` tasks run at once and up to ``queue_depth`` more wait in
  order; a new task beyond that is refused with ``-32050`` before anything is created.
  ``single`` takes exactly one task in the session's life; ``after_task: exit`` asks the
  session to stop once a task has ended and nothing else is held.
* **The executor.** Each task runs the agent callable once (``AgentFn``) with a
  :class:`TaskRun`, the handle through which the agent reports status, artifacts, asks for
  input, rejects or replies. Its return value completes the task with one text artifact;
  an exception fails it with its message; CancelTask cancels its coroutine.
* **Contexts.** A task in the ``contextId`` of earlier tasks of the same owner reads
  their exchange (:meth:`TaskStore.context_history`: each one's messages, then its
  artifacts as agent messages), so a conversation goes on across tasks; an index by
  context keeps that one lookup for a new context.
* **Earlier sessions.** :meth:`TaskStore.restore` takes the tasks a member's earlier
  session kept (``mur run --resume``, a restart): each answers its owner again; one that
  was live then is ``FAILED`` with a message saying so, never silently gone.
* **Retention.** Ended tasks are kept for GetTask and ListTasks within two bounds, a
  count (``max_finished``) and a byte budget (``max_finished_bytes``); past either the
  oldest ended task is forgotten first, and answers ``-32001`` like an unknown id. A
  queued or running task is never forgotten. A task's bytes are estimated once per
  change (its first message, each status message, each artifact chunk), never by
  encoding the whole task again.

Wire objects are kept as plain camelCase dicts, replaced rather than mutated once
published (copy-on-write), so a queued stream event never changes under its reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from gateway.a2a.jsonrpc import RpcError, member_busy
from gateway.a2a.models import ListTasksRequest
from gateway.auth.edge_limits import EDGE_CALL
from gateway.caller import Caller, Credential, CredentialKind
from gateway.door.approvals import Approvals
from gateway.door.listing import page_of
from gateway.door.retention import FinishedTasks, json_weight
from gateway.door.task_listeners import KeptTask, TaskJournal, TaskListeners
from gateway.door.task_record import (
    StreamEvent,
    TaskRecord,
    agent_message,
    answer_messages,
    message_text,
    new_id,
)
from gateway.errors import GatewayError
from gateway.protocol import INTERRUPTED_STATES, TERMINAL_STATES, TaskState
from gateway.trace.bus import TraceBus, utc_timestamp
from gateway.trace.context import INCOMING_TRACEPARENT, task_span

log = logging.getLogger("murmur.door")

AgentFn = Callable[["TaskRun"], Awaitable[str | None]]

RESULT_ARTIFACT_NAME = "result"
#: Seconds a task waits for the operator when its edge names no ``approve_timeout``.
DEFAULT_APPROVE_TIMEOUT = 600.0
#: Ended tasks kept, at most, and the bytes they may hold together (docs/door.md, "Tasks").
DEFAULT_MAX_FINISHED = 10_000
DEFAULT_MAX_FINISHED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GateConfig:
    """The lifecycle gate, as ``murmur.yaml``'s ``lifecycle`` section sets it."""

    concurrency: int = 1
    queue_depth: int = 0
    task_acceptance: Literal["single", "queue"] = "queue"
    after_task: Literal["exit", "sleep"] = "sleep"
    #: The ``retryAfterMs`` a refused caller is given.
    retry_after_ms: int = 500

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("lifecycle.concurrency must be at least 1")
        if self.queue_depth < 0:
            raise ValueError("lifecycle.queue_depth must be 0 or more")
        if self.task_acceptance not in ("single", "queue"):
            raise ValueError("lifecycle.task_acceptance must be single or queue")
        if self.after_task not in ("exit", "sleep"):
            raise ValueError("lifecycle.after_task must be exit or sleep")

    @property
    def holds(self) -> int:
        """How many tasks the member holds at once: running plus waiting."""
        return self.concurrency + self.queue_depth


class TaskEndedError(GatewayError, RuntimeError):
    """An agent reported on a task that has already ended (or replied)."""


#: States whose ``task_state`` trace record says why (the status message's text): how a
#: task failed, was refused or canceled, or what it asks for.
_REASONED_STATES: frozenset[str] = frozenset({
    TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED, *INTERRUPTED_STATES})


class TaskStore(TaskListeners):
    """Every task of one door, the gate in front of them and the executor behind them."""

    def __init__(self, agent: AgentFn, gate: GateConfig, trace: TraceBus, *,
                 max_finished: int = DEFAULT_MAX_FINISHED,
                 max_finished_bytes: int = DEFAULT_MAX_FINISHED_BYTES) -> None:
        super().__init__()
        self._agent = agent
        self.gate = gate
        self._trace = trace
        self._tasks: dict[str, TaskRecord] = {}
        #: The ids of each context's tasks still kept, oldest first.
        self._contexts: dict[str, list[str]] = {}
        #: Ended tasks still kept, within their bounds (gateway/door/retention.py).
        self.finished = FinishedTasks(max_finished, max_finished_bytes, self._forget)
        self._running: set[TaskRecord] = set()
        self._queue: deque[TaskRecord] = deque()
        self._accepted = 0
        self._ended = 0
        self._accepting = True
        #: Where every change of a task is also kept (durable tasks), when anywhere.
        self.journal: TaskJournal | None = None
        #: Tasks that wait for the operator (approve: true on their edge).
        self.approvals = Approvals(trace, set_state=self._set_state, run=self._run_approved,
                                   busy_retry_ms=gate.retry_after_ms)

    # --- queries ---------------------------------------------------------------------

    @property
    def held(self) -> int:
        return len(self._running) + len(self._queue)

    def state_counts(self) -> dict[str, int]:
        """The tasks kept (live and ended), by state."""
        counts: dict[str, int] = {}
        for record in self._tasks.values():
            counts[record.state] = counts.get(record.state, 0) + 1
        return counts

    @property
    def finished_bytes(self) -> int:
        """The estimated bytes of the ended tasks still kept."""
        return self.finished.bytes

    def known(self, task_id: str) -> bool:
        """Whether the door still holds task ``task_id`` (live, or ended and kept)."""
        return task_id in self._tasks

    def visible(self, task_id: Any, caller: Caller) -> TaskRecord:
        """The task ``task_id`` if ``caller`` may reach it, else the one -32001."""
        record = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if record is None or not _may_see(caller, record):
            raise RpcError("TASK_NOT_FOUND")
        return record

    def list_tasks(self, caller: Caller, request: ListTasksRequest) -> dict[str, Any]:
        """ListTasks: the caller's tasks, newest status first, cursor-paginated."""
        page = page_of((record for record in self._tasks.values() if _may_see(caller, record)),
                       request)
        # Unset means no limit, as for GetTask (the specification's history-length rule).
        history = request.history_length
        tasks = []
        for record in page.tasks:
            record.revealed = True
            tasks.append(record.snapshot(history, include_artifacts=request.include_artifacts))
        return {"tasks": tasks, "nextPageToken": page.next_token, "pageSize": page.page_size,
                "totalSize": page.total}

    def context_history(self, record: TaskRecord) -> list[dict[str, Any]]:
        """The exchange before ``record`` in its context, oldest first: each earlier task
        of the same owner still kept, its messages and then its answers (artifacts) as
        agent messages. Empty for a new context (one lookup)."""
        ids = self._contexts.get(record.context_id)
        if ids is None or ids[0] == record.id:
            return []
        messages: list[dict[str, Any]] = []
        for task_id in ids:
            if task_id == record.id:
                break
            earlier = self._tasks[task_id]
            if earlier.owner == record.owner:
                messages += earlier.history
                messages += answer_messages(earlier)
        return messages

    # --- earlier sessions ------------------------------------------------------------

    def restore(self, kept: Iterable[KeptTask]) -> int:
        """Start with the tasks an earlier session of this member kept, oldest first:
        each answers its owner again (and the operator); one that was live when that
        session ended is FAILED now with a message saying so, and written so to the
        journal. Ended ones count against the retention bounds. Returns how many were
        live."""
        failed = 0
        for entry in kept:
            task = entry.task
            if not isinstance(task.get("id"), str) or task["id"] in self._tasks:
                continue
            record = TaskRecord.restored(task, _owner_caller(entry.owner))
            record.updated_ns = entry.updated_ns
            self._keep(record)
            if not record.terminal:
                failed += 1
                self._fail_restored(record)
            self.finished.remember(record.id, record.size)
            self._journal(record)
        return failed

    def _fail_restored(self, record: TaskRecord) -> None:
        was = record.state.removeprefix("TASK_STATE_").lower().replace("_", "-")
        reason = (f"the member's earlier session ended while this task was {was}; it did "
                  "not finish and will not: send the message again for a new task")
        message = agent_message(reason, record.context_id, record.id)
        record.history = [*record.history, message]
        record.size += json_weight(message)
        record.state = TaskState.FAILED
        record.status = {"state": TaskState.FAILED, "message": message,
                         "timestamp": utc_timestamp()}
        record.updated_ns = time.time_ns()
        self._trace.emit("task_state", task_id=record.id, state=TaskState.FAILED,
                         reason=reason)

    # --- sending ---------------------------------------------------------------------

    def send(self, message: dict[str, Any], caller: Caller,
             metadata: dict[str, Any] | None = None) -> TaskRecord:
        """SendMessage: a new task through the gate, or the follow-up of one awaiting input.

        ``message`` is a validated A2A Message dict. Raises RpcError for every refusal.
        """
        task_id = message.get("taskId")
        if task_id:
            record = self.visible(task_id, caller)
            context_id = message.get("contextId")
            if context_id and context_id != record.context_id:
                raise RpcError("INVALID_PARAMS",
                               "message.contextId differs from the context of message.taskId")
            self._resume(record, message)
            return record
        return self._admit(message, caller, metadata)

    def _admit(self, message: dict[str, Any], caller: Caller,
               metadata: dict[str, Any] | None) -> TaskRecord:
        gate = self.gate
        if (not self._accepting or self.held >= gate.holds
                or (gate.task_acceptance == "single" and self._accepted >= 1)):
            raise member_busy(gate.retry_after_ms)
        edge = EDGE_CALL.get()
        waits = edge is not None and edge.limits is not None and edge.limits.approve
        if waits and edge is not None and edge.limits is not None:
            # Its caller's share of the approval room first, then the room.
            self.approvals.check_room(caller.credential.owner, edge.limits.approval_share,
                                      edge.caller)
        record = TaskRecord(message, caller, metadata)
        if edge is not None:        # a member's call through the door's EdgeGuard
            record.depth = edge.depth
            record.edge = edge
            edge.task_created()
        self._accepted += 1
        self._keep(record)
        self._journal(record)
        credential = caller.credential
        span = task_span(INCOMING_TRACEPARENT.get())
        if credential.kind == "member":
            self._trace.emit("a2a_task_received", task_id=record.id,
                             context_id=record.context_id, credential=credential.name,
                             origin=caller.origin, trust=caller.trust,
                             formation_member=credential.member, depth=record.depth,
                             trace_id=span.trace_id,
                             span_id=span.span_id, parent_span_id=span.parent_span_id)
        else:
            self._trace.emit("a2a_task_received", task_id=record.id,
                             context_id=record.context_id, credential=credential.name,
                             origin=caller.origin, trust=caller.trust,
                             trace_id=span.trace_id, span_id=span.span_id,
                             parent_span_id=span.parent_span_id)
        self._trace.emit("task_state", task_id=record.id, state=record.state)
        if waits and edge is not None and edge.limits is not None:
            self.approvals.hold(record, edge.caller,
                                edge.limits.approve_timeout or DEFAULT_APPROVE_TIMEOUT)
            return record
        if len(self._running) < gate.concurrency:
            self._start(record)
        else:
            self._queue.append(record)
        return record

    def _resume(self, record: TaskRecord, message: dict[str, Any]) -> None:
        if record.terminal:
            raise RpcError("UNSUPPORTED_OPERATION",
                           f"the task has ended ({record.state}) and takes no more messages")
        waiter = record.input_waiter
        if record.state != TaskState.INPUT_REQUIRED or waiter is None or waiter.done():
            raise RpcError("UNSUPPORTED_OPERATION",
                           f"the task is {record.state}, not waiting for input")
        message = {**message, "taskId": record.id, "contextId": record.context_id}
        record.history = [*record.history, message]
        record.size += json_weight(message)
        record.input_waiter = None
        self._set_state(record, TaskState.WORKING)
        waiter.set_result(message)

    # --- waiting and watching ----------------------------------------------------------

    async def settled(self, record: TaskRecord, *, interrupted: bool = True) -> None:
        """Wait until the task ends (or, with ``interrupted``, awaits input or auth)."""
        if record.terminal or (interrupted and record.state in INTERRUPTED_STATES):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (waiter, interrupted)
        record.waiters = (*record.waiters, entry)
        try:
            await waiter
        finally:
            if entry in record.waiters:
                record.waiters = tuple(kept for kept in record.waiters if kept is not entry)

    def subscribe(self, record: TaskRecord) -> asyncio.Queue[StreamEvent | None]:
        """A queue of the task's StreamResponse events from now on; None when it ends."""
        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
        record.subscribers = (*record.subscribers, queue)
        record.revealed = True
        return queue

    def unsubscribe(self, record: TaskRecord, queue: asyncio.Queue[StreamEvent | None]) -> None:
        if queue in record.subscribers:
            record.subscribers = tuple(kept for kept in record.subscribers
                                       if kept is not queue)

    # --- cancel and wind-down ----------------------------------------------------------

    def cancel(self, record: TaskRecord, reason: str | None = None) -> None:
        """CancelTask: a queued task leaves the queue, a running one has its agent cancelled."""
        if record.terminal:
            raise RpcError("TASK_NOT_CANCELABLE", f"the task has already ended ({record.state})")
        message = agent_message(reason, record.context_id, record.id) if reason else None
        self._set_state(record, TaskState.CANCELED, message)
        if record in self._queue:
            self._queue.remove(record)
            self._after_task()
        elif record.runner is not None:
            record.runner.cancel()

    def close_gate(self) -> None:
        """Take no new task from now on (the session is winding down)."""
        self._accepting = False

    def refuse_queued(self, reason: str = "the member is shutting down") -> int:
        """End every waiting task TASK_STATE_REJECTED (those waiting for the operator
        too); returns how many there were."""
        refused = self.approvals.refuse_all(reason)
        while self._queue:
            record = self._queue.popleft()
            self._set_state(record, TaskState.REJECTED,
                            agent_message(reason, record.context_id, record.id))
            refused += 1
        return refused

    def cancel_running(self, reason: str = "the member is shutting down") -> int:
        """Cancel every running task; returns how many there were."""
        running = [record for record in self._running if not record.terminal]
        for record in running:
            self.cancel(record, reason)
        return len(running)

    async def drained(self) -> None:
        """Wait until no agent coroutine runs any more."""
        runners = [record.runner for record in self._running if record.runner is not None]
        if runners:
            await asyncio.wait(runners)

    # --- the executor ------------------------------------------------------------------

    def _run_approved(self, record: TaskRecord) -> None:
        """A task the operator approved goes through the gate as a new one would; past
        ``concurrency`` it queues (it was accepted already, so past ``queue_depth`` too)."""
        if len(self._running) < self.gate.concurrency:
            self._start(record)
        else:
            self._queue.append(record)

    def _start(self, record: TaskRecord) -> None:
        self._running.add(record)
        self._set_state(record, TaskState.WORKING)
        runner = asyncio.get_running_loop().create_task(
            self._run(record), name=f"murmur-task-{record.id}")
        record.runner = runner
        # A done-callback, not a finally: a runner cancelled before its first step never
        # enters its coroutine, and its place must still be given back.
        runner.add_done_callback(lambda _: self._runner_done(record))

    async def _run(self, record: TaskRecord) -> None:
        try:
            result = await self._agent(TaskRun(self, record))
        except asyncio.CancelledError:
            if not record.terminal:
                self._set_state(record, TaskState.CANCELED)
        except Exception as exc:  # the agent's failure fails its task, never the door
            if not record.terminal:
                log.warning("task %s failed", record.id, exc_info=exc)
                text = str(exc) or type(exc).__name__
                self._set_state(record, TaskState.FAILED,
                                agent_message(text, record.context_id, record.id))
        else:
            if not record.terminal:
                if result is not None:
                    self._add_artifact(record, [{"text": str(result)}],
                                       name=RESULT_ARTIFACT_NAME, last_chunk=True)
                self._set_state(record, TaskState.COMPLETED)

    def _runner_done(self, record: TaskRecord) -> None:
        if not record.terminal:  # cancelled before it ever ran
            self._set_state(record, TaskState.CANCELED)
        waiter = record.input_waiter
        if waiter is not None and not waiter.done():
            waiter.cancel()
        record.input_waiter = None
        record.runner = None
        self._running.discard(record)
        while self._queue and len(self._running) < self.gate.concurrency:
            self._start(self._queue.popleft())
        self._after_task()

    def _after_task(self) -> None:
        if self.gate.after_task == "exit" and self._ended >= 1:
            self._accepting = False
            if self.held == 0:
                self.request_stop("after_task")

    # --- state changes -----------------------------------------------------------------

    def _set_state(self, record: TaskRecord, state: str,
                   message: dict[str, Any] | None = None) -> None:
        previous = record.state
        status: dict[str, Any] = {"state": state}
        if message is not None:
            status["message"] = message
            record.history = [*record.history, message]
            record.size += json_weight(message)
        status["timestamp"] = utc_timestamp()
        record.state = state
        record.status = status
        record.updated_ns = time.time_ns()
        if state != previous:
            if message is not None and state in _REASONED_STATES:
                self._trace.emit("task_state", task_id=record.id, state=state,
                                 reason=message_text(message))
            else:
                self._trace.emit("task_state", task_id=record.id, state=state)
        self._publish(record, {"statusUpdate": {
            "taskId": record.id, "contextId": record.context_id, "status": status}})
        terminal = state in TERMINAL_STATES
        self._journal(record)
        if terminal or state in INTERRUPTED_STATES:
            keep: list[tuple[asyncio.Future[None], bool]] = []
            for waiter, interrupted in record.waiters:
                if terminal or interrupted:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    keep.append((waiter, interrupted))
            record.waiters = tuple(keep)
        if terminal:
            self._ended += 1
            if record.edge is not None:
                record.edge.task_ended()
                record.edge = None      # counted: nothing of the call outlives the task
                if len(self.approvals):
                    self.approvals.ended(record)
            if self.gate.after_task == "exit":
                self._accepting = False  # the session ends after this task: take no other
            for queue in record.subscribers:
                queue.put_nowait(None)
            record.subscribers = ()
            self._remember_finished(record)
            if self._task_listeners:
                self.tell_task_end(record.snapshot())

    def _remember_finished(self, record: TaskRecord) -> None:
        if record.reply is not None and not record.revealed:
            # Answered with a Message alone: the task is not kept.
            self._forget(record.id)
            return
        self.finished.remember(record.id, record.size)

    def _keep(self, record: TaskRecord) -> None:
        self._tasks[record.id] = record
        self._contexts.setdefault(record.context_id, []).append(record.id)

    def _forget(self, task_id: str) -> None:
        """An ended task past the retention bounds: it answers -32001 from now on."""
        record = self._tasks.pop(task_id, None)
        if record is None:
            return
        ids = self._contexts.get(record.context_id)
        if ids is not None:
            ids.remove(task_id)
            if not ids:
                del self._contexts[record.context_id]

    def _journal(self, record: TaskRecord) -> None:
        if self.journal is not None:
            self.journal.put(record)

    def _publish(self, record: TaskRecord, event: StreamEvent) -> None:
        for queue in record.subscribers:
            queue.put_nowait(event)

    def _add_artifact(self, record: TaskRecord, parts: list[dict[str, Any]], *,
                      name: str | None = None, description: str | None = None,
                      artifact_id: str | None = None, append: bool = False,
                      last_chunk: bool = False, metadata: dict[str, Any] | None = None) -> str:
        if append and artifact_id is None and record.artifacts:
            artifact_id = record.artifacts[-1]["artifactId"]
        artifact_id = artifact_id or new_id()
        chunk: dict[str, Any] = {"artifactId": artifact_id}
        if name is not None:
            chunk["name"] = name
        if description is not None:
            chunk["description"] = description
        chunk["parts"] = parts
        if metadata:
            chunk["metadata"] = metadata
        index = next((i for i, a in enumerate(record.artifacts)
                      if a["artifactId"] == artifact_id), None)
        artifacts = list(record.artifacts)
        if index is None:
            artifacts.append(chunk)
            record.size += json_weight(chunk)
        elif append:
            artifacts[index] = {**artifacts[index], "parts": [*artifacts[index]["parts"], *parts]}
            record.size += json_weight(parts)
        else:
            record.size += json_weight(chunk) - json_weight(artifacts[index])
            artifacts[index] = chunk
        record.artifacts = artifacts
        self._journal(record)
        event: dict[str, Any] = {"taskId": record.id, "contextId": record.context_id,
                                 "artifact": chunk}
        if append:
            event["append"] = True
        if last_chunk:
            event["lastChunk"] = True
        self._publish(record, {"artifactUpdate": event})
        return artifact_id

    # --- used by TaskRun ---------------------------------------------------------------

    def _reply(self, record: TaskRecord, text: str) -> None:
        if record.revealed:
            # The caller already holds the task: the reply completes it.
            self._set_state(record, TaskState.COMPLETED,
                            agent_message(text, record.context_id, record.id))
            return
        record.reply = agent_message(text, record.context_id, None)
        self._set_state(record, TaskState.COMPLETED, record.reply)


class TaskRun:
    """What the executor hands the agent for one task (``launcher.member.capsule`` wraps it)."""

    __slots__ = ("_store", "_record")

    def __init__(self, store: TaskStore, record: TaskRecord) -> None:
        self._store = store
        self._record = record

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def context_id(self) -> str:
        return self._record.context_id

    @property
    def message(self) -> dict[str, Any]:
        """The A2A Message that started the task (a dict, camelCase)."""
        return self._record.first_message

    @property
    def text(self) -> str:
        return message_text(self._record.first_message)

    @property
    def message_id(self) -> str:
        return str(self._record.first_message.get("messageId", ""))

    @property
    def caller(self) -> Caller:
        return self._record.caller

    @property
    def state(self) -> str:
        return self._record.state

    @property
    def history(self) -> list[dict[str, Any]]:
        """The context's exchange before this task (:meth:`TaskStore.context_history`):
        a conversation continued in the same ``contextId``, after a resume too."""
        return self._store.context_history(self._record)

    @property
    def ended(self) -> bool:
        return self._record.terminal

    def _open(self, action: str) -> TaskRecord:
        record = self._record
        if record.terminal:
            raise TaskEndedError(f"cannot {action}: the task has already ended ({record.state})")
        return record

    async def status(self, text: str) -> None:
        """Report progress: the task stays WORKING with ``text`` as its status message."""
        record = self._open("report a status")
        self._store._set_state(record, TaskState.WORKING,
                               agent_message(text, record.context_id, record.id))

    async def artifact(self, parts: Iterable[dict[str, Any]], *, name: str | None = None,
                       description: str | None = None, artifact_id: str | None = None,
                       append: bool = False, last_chunk: bool = False,
                       metadata: dict[str, Any] | None = None) -> str:
        """Add (or, with ``append``, extend) an artifact; returns its artifact id.

        ``append`` without ``artifact_id`` extends the artifact added last.
        """
        record = self._open("add an artifact")
        chunk = [dict(part) for part in parts]
        if not chunk:
            raise ValueError("an artifact needs at least one part")
        return self._store._add_artifact(record, chunk, name=name, description=description,
                                         artifact_id=artifact_id, append=append,
                                         last_chunk=last_chunk, metadata=metadata)

    async def input_required(self, text: str) -> dict[str, Any]:
        """Ask for input: the task is INPUT_REQUIRED until a SendMessage with its taskId
        arrives; returns that message (the task is WORKING again)."""
        record = self._open("ask for input")
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        record.input_waiter = waiter
        self._store._set_state(record, TaskState.INPUT_REQUIRED,
                               agent_message(text, record.context_id, record.id))
        return await waiter

    async def reject(self, text: str) -> None:
        """End the task TASK_STATE_REJECTED with ``text`` as the reason."""
        record = self._open("reject the task")
        self._store._set_state(record, TaskState.REJECTED,
                               agent_message(text, record.context_id, record.id))

    async def reply(self, text: str) -> None:
        """Answer with a Message alone; the task is not kept (when nobody has seen it)."""
        record = self._open("reply")
        self._store._reply(record, text)


def acts_as_operator(caller: Caller) -> bool:
    """The session's operator; at a public door (nothing authenticated, every caller is
    ``public``) every caller is, as nobody can be told apart from the operator there."""
    return caller.credential.kind in ("operator", "public")


def _owner_caller(owner: str) -> Caller:
    """Who stands for the owner of a restored task (it never runs: only its owner's name
    is read, by visibility)."""
    kind: CredentialKind = "operator" if owner == "operator" \
        else "member" if owner.startswith("member:") else "bearer"
    return Caller(Credential(kind=kind, name=owner, scopes=frozenset(), owner=owner),
                  origin="client", trust="untrusted")


def _may_see(caller: Caller, record: TaskRecord) -> bool:
    return acts_as_operator(caller) or caller.credential.owner == record.owner
