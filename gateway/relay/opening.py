"""The Task a relayed stream begins with: A2A 1.0 has every ``SendStreamingMessage`` and
``SubscribeToTask`` stream that is about a task begin with the Task (v1.0.1 section
3.1.2), and an A2A 0.3 upstream (a2a-sdk 0.3 serving BeeAI, say) often begins with a
status update instead, as 0.3 allowed. The relay (:mod:`gateway.relay.methods`, and
:mod:`gateway.relay.fanout` for a subscription) asks :func:`opening_task` about a
stream's first event only, after the door has observed it; every later event, and a
stream that begins with its Task or is a Message, passes as it came.

When the first event is a status or artifact update, the Task is made in this order:

1. ``id`` and ``contextId`` from the update (the context the door knows for a task
   whose update names none);
2. ``status``: the update's own for a status update, else the last the door saw of the
   task (its Task read just before, or its snapshot), else the state it knows;
3. ``history``: the task's history as the door last saw it, then the message that
   started this stream (a ``SendStreamingMessage``'s, with the task's ids), kept within
   the caller's ``historyLength``; ``artifacts`` as the door last saw them.

The Task is the caller's copy only: it is never observed (the door's snapshot of the task
stays what the upstream sent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.protocol import TaskState
from gateway.relay.known import KnownTask

__all__ = ["opening_task"]

_UPDATES = ("statusUpdate", "artifactUpdate")


def opening_task(event: Any, known_of: Callable[[str], KnownTask | None], *,
                 seen: Any = None, message: Any = None,
                 history_length: Any = None) -> dict[str, Any] | None:
    """The ``{"task": ...}`` event to send before ``event``, the first of a stream (see
    the module text), or None when ``event`` is a Task or a Message or names no task.
    ``known_of``: the task as the door knows it, by its id; ``seen``: a Task of it the
    door read just now (else the known task's snapshot); ``message``: the message that
    started the stream; ``history_length``: the caller's."""
    if not isinstance(event, dict) or "task" in event:
        return None
    update = None
    for key in _UPDATES:
        update = event.get(key)
        if update is not None:
            break
    if not isinstance(update, dict):
        return None
    task_id = update.get("taskId")
    if type(task_id) is not str or not task_id:
        return None
    known = known_of(task_id)
    if not isinstance(seen, dict) and known is not None:
        seen = known.snapshot
    seen = seen if isinstance(seen, dict) and seen.get("id") == task_id else {}
    context_id = update.get("contextId")
    if type(context_id) is not str or not context_id:
        context_id = known.context_id if known is not None else seen.get("contextId", "")
    status = update.get("status") if "statusUpdate" in event else None
    if not isinstance(status, dict):
        status = seen.get("status")
    if not isinstance(status, dict):
        status = {"state": str(known.state) if known is not None else TaskState.SUBMITTED.value}
    task: dict[str, Any] = {"id": task_id, "contextId": context_id, "status": status}
    history = seen.get("history")
    history = list(history) if isinstance(history, list) else []
    if isinstance(message, dict):
        history.append({**message, "taskId": task_id, "contextId": context_id})
    if type(history_length) is int and history_length >= 0:
        history = history[-history_length:] if history_length else []
    if history:
        task["history"] = history
    artifacts = seen.get("artifacts")
    if isinstance(artifacts, list) and artifacts:
        task["artifacts"] = artifacts
    return {"task": task}
