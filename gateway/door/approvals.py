"""Tasks that wait for the operator: ``approve: true`` on the edge a call came along
(roster version 2, docs/bounds.md).

In order: :class:`Approval`, one task waiting; :class:`Approvals`, every waiting task of
one door's store. The store hands a new task here instead of running it
(:meth:`Approvals.hold`): the task is accepted in ``TASK_STATE_AUTH_REQUIRED`` with a
status message saying it waits for the operator (its metadata marks it, so call-member
keeps waiting where any other auth-required task ends the call) and an ``approval``
trace record (``decision: waiting``). Then exactly one of: the operator approves it
(``murmur.ApproveTask``; it runs through the gate as any task would, queued past
``concurrency``), denies it (``murmur.DenyTask``, ``TASK_STATE_REJECTED`` with the
reason), ``approve_timeout`` passes (rejected, saying so), or it ends some other way
(canceled, the session ending). Each decision is an ``approval`` record naming who
decided and how long the task waited. A task waiting takes no place in the gate: it runs
nothing.

The waiting room is shared by callers (docs/bounds.md, "Approval"): before a task that
would wait is made (:meth:`Approvals.check_room`), first its caller's share is checked,
then the room. A caller is the owner of the task (``caller.credential.owner``, as for
streams: ``member:<name>`` for a formation token, so one edge's caller; only calls along
an ``approve: true`` edge ever wait). One caller holds at most its share
(``approve_queue`` on its edge, else :data:`APPROVE_QUEUE_DEFAULT`), and at most
:data:`MAX_WAITING` wait at one door; past either a call is answered busy (``-32050``,
which call-member offers again) with a message naming the bound and its key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gateway.a2a.jsonrpc import RpcError, member_busy
from gateway.auth.edge_limits import APPROVAL_ROOM, APPROVE_QUEUE_DEFAULT
from gateway.door.task_record import TaskRecord, agent_message, message_text
from gateway.protocol import APPROVAL_METADATA_KEY, TaskState
from gateway.trace.bus import TraceBus, utc_timestamp

__all__ = ["APPROVE_QUEUE_DEFAULT", "MAX_WAITING", "Approval", "Approvals"]

#: Tasks that may wait for the operator at one door at once, all callers together.
MAX_WAITING: Final = APPROVAL_ROOM
#: How much of a task's text ``murmur.ListApprovals`` shows.
TEXT_HEAD: Final = 200


@dataclass(slots=True)
class Approval:
    record: TaskRecord
    caller: str
    since: float                    # time.monotonic()
    since_utc: str
    timeout: float
    timer: asyncio.TimerHandle | None = None

    def row(self) -> dict[str, Any]:
        waited = time.monotonic() - self.since
        return {"taskId": self.record.id, "caller": self.caller,
                "text": message_text(self.record.first_message)[:TEXT_HEAD],
                "waitingSince": self.since_utc, "waitedSeconds": round(waited, 3),
                "timeoutSeconds": self.timeout,
                "secondsLeft": round(max(0.0, self.timeout - waited), 3)}


class Approvals:
    """The tasks of one store that wait for the operator (see the module text).
    ``set_state(record, state, message)`` and ``run(record)`` are the store's."""

    def __init__(self, trace: TraceBus, *,
                 set_state: Callable[[TaskRecord, str, dict[str, Any] | None], None],
                 run: Callable[[TaskRecord], None], busy_retry_ms: int) -> None:
        self._trace = trace
        self._set_state = set_state
        self._run = run
        self._busy_retry_ms = busy_retry_ms
        self._waiting: dict[str, Approval] = {}
        #: How many tasks wait, by owner (an owner with none is not kept).
        self._held: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def check_room(self, owner: str, share: int = APPROVE_QUEUE_DEFAULT,
                   caller: str | None = None) -> None:
        """Before a task of ``owner`` that will wait is made: -32050 when ``owner`` holds
        its ``share`` already, or the door holds :data:`MAX_WAITING`. ``caller`` is the
        name the message gives the owner (a member's name)."""
        held = self._held.get(owner, 0)
        if held >= share:
            who = f"member {caller}" if caller else owner
            raise self._busy(
                f"{who} already has {held} calls waiting for the operator here, its "
                f"share of this door's approval room (approve_queue: {share}, on its edge "
                "in roster.yaml: raise it to let more of its calls wait, or approve or "
                "deny those: mur approvals)")
        if len(self._waiting) >= MAX_WAITING:
            raise self._busy(
                f"{len(self._waiting)} calls wait for the operator here, all this door's "
                "approval room holds (approve or deny them: mur approvals)")

    def hold(self, record: TaskRecord, caller: str, timeout: float) -> None:
        """Accept ``record`` waiting for the operator, for at most ``timeout`` seconds;
        it takes one place of its owner's share (:meth:`check_room` came first)."""
        approval = Approval(record, caller, time.monotonic(), utc_timestamp(), timeout)
        self._waiting[record.id] = approval
        self._held[record.owner] = self._held.get(record.owner, 0) + 1
        message = agent_message(
            f"Waiting for the operator's approval of this call from member {caller} "
            f"(approve: true in roster.yaml): mur approve or mur deny.",
            record.context_id, record.id)
        message["metadata"] = {APPROVAL_METADATA_KEY: "waiting"}
        self._set_state(record, TaskState.AUTH_REQUIRED, message)
        self._trace.emit("approval", task_id=record.id, caller=caller, decision="waiting",
                         timeout_s=timeout)
        approval.timer = asyncio.get_running_loop().call_later(
            timeout, self._time_out, record.id)

    def pending(self) -> list[dict[str, Any]]:
        """``murmur.ListApprovals``: every waiting task, the longest waiting first."""
        return [approval.row() for approval in
                sorted(self._waiting.values(), key=lambda approval: approval.since)]

    def approve(self, task_id: str, by: str) -> TaskRecord:
        approval = self._take(task_id)
        self._record(approval, "approved", by, None)
        record = approval.record
        self._set_state(record, TaskState.SUBMITTED, agent_message(
            f"Approved by the {by}.", record.context_id, record.id))
        self._run(record)
        return record

    def deny(self, task_id: str, by: str, reason: str | None) -> TaskRecord:
        approval = self._take(task_id)
        self._record(approval, "denied", by, reason)
        record = approval.record
        said = f": {reason}" if reason else ""
        self._set_state(record, TaskState.REJECTED, agent_message(
            f"Denied by the {by}{said}", record.context_id, record.id))
        return record

    def ended(self, record: TaskRecord) -> None:
        """The store: ``record`` ended some other way (canceled, the session ending)."""
        approval = self._leave(record.id)
        if approval is not None:
            if approval.timer is not None:
                approval.timer.cancel()
            by = "caller" if record.state == TaskState.CANCELED else "session"
            self._record(approval, "withdrawn", by, record.state)

    def refuse_all(self, reason: str) -> int:
        """The session ends: every waiting task is rejected with ``reason``."""
        records = [approval.record for approval in self._waiting.values()]
        for record in records:
            self._set_state(record, TaskState.REJECTED,
                            agent_message(reason, record.context_id, record.id))
        return len(records)

    # --- inside ------------------------------------------------------------------------

    def _busy(self, detail: str) -> RpcError:
        """The gate's own refusal (a caller offers the call again), saying which bound."""
        busy = member_busy(self._busy_retry_ms)
        return RpcError("MEMBER_BUSY", detail, metadata=busy.metadata, extra=busy.extra)

    def _leave(self, task_id: str) -> Approval | None:
        """``task_id`` waits no more: its place in its owner's share is free."""
        approval = self._waiting.pop(task_id, None)
        if approval is not None:
            owner = approval.record.owner
            held = self._held[owner] - 1
            if held:
                self._held[owner] = held
            else:
                del self._held[owner]
        return approval

    def _take(self, task_id: str) -> Approval:
        approval = self._leave(task_id)
        if approval is None:
            raise RpcError("TASK_NOT_FOUND", "no task with that id waits for approval here")
        if approval.timer is not None:
            approval.timer.cancel()
        return approval

    def _time_out(self, task_id: str) -> None:
        approval = self._leave(task_id)
        if approval is None:
            return
        self._record(approval, "timed_out", "approve_timeout", None)
        record = approval.record
        self._set_state(record, TaskState.REJECTED, agent_message(
            f"No approval within {approval.timeout:g} s (approve_timeout in roster.yaml).",
            record.context_id, record.id))

    def _record(self, approval: Approval, decision: str, by: str,
                reason: str | None) -> None:
        fields: dict[str, Any] = {"task_id": approval.record.id, "caller": approval.caller,
                                  "decision": decision, "by": by,
                                  "waited_ms": round((time.monotonic() - approval.since)
                                                     * 1000, 1)}
        if reason:
            fields["reason"] = reason[:500]
        self._trace.emit("approval", **fields)
