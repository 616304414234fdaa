"""One task as a door keeps it: :class:`TaskRecord`, its wire state (copy-on-write
camelCase dicts) and what the door needs to drive and watch it; with the ids and
messages a door makes (:func:`new_id`, :func:`agent_message`) and reads
(:func:`message_text`).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from gateway.caller import Caller
from gateway.door.retention import json_weight
from gateway.protocol import TERMINAL_STATES, TaskState
from gateway.trace.bus import utc_timestamp

if TYPE_CHECKING:
    from gateway.auth.edge_limits import EdgeCall

__all__ = ["StreamEvent", "TaskRecord", "agent_message", "answer_messages", "message_text",
           "new_id", "new_task_id"]

StreamEvent = dict[str, Any]
#: What a task weighs before its messages and artifacts: the record, its status dicts.
_RECORD_WEIGHT = 1024


def new_id() -> str:
    """A fresh id: 128 random bits in 32 hex digits (as unguessable as a UUID4)."""
    return os.urandom(16).hex()


def new_task_id() -> str:
    """A task's id: 32 hex digits as :func:`new_id`'s, the first 12 the time it was made
    (milliseconds since the epoch), the other 20 random (80 bits: unguessable still).
    In the order tasks are made, so a ``tasks.db`` keeps its index of ids by adding at
    its end: with random ids every batch rewrote pages all over that index (SQLite's
    CPU a task 8.5 -> 5.1 us, docs/durable-tasks.md). What the id tells beyond a random
    one is when the task was made, to the millisecond."""
    return f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}{os.urandom(10).hex()}"


def agent_message(text: str, context_id: str, task_id: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": new_id(), "contextId": context_id}
    if task_id is not None:
        message["taskId"] = task_id
    message["role"] = "ROLE_AGENT"
    message["parts"] = [{"text": text}]
    return message


def message_text(message: dict[str, Any]) -> str:
    """The text of a message: its text parts joined by newlines."""
    return "\n".join(
        part["text"] for part in message.get("parts", ()) if isinstance(part.get("text"), str)
    )


class TaskRecord:
    """One task: its wire state plus what the door needs to drive and watch it."""

    __slots__ = (
        "id", "context_id", "owner", "caller", "state", "status", "artifacts", "history",
        "metadata", "updated_ns", "subscribers", "waiters", "runner", "input_waiter",
        "revealed", "reply", "first_message", "size", "depth", "edge",
    )

    def __init__(self, message: dict[str, Any], caller: Caller,
                 metadata: dict[str, Any] | None) -> None:
        self.id = new_task_id()
        self.context_id: str = message.get("contextId") or new_id()
        self.owner = caller.credential.owner
        self.caller = caller
        self.first_message = {**message, "taskId": self.id, "contextId": self.context_id}
        self.history: list[dict[str, Any]] = [self.first_message]
        self.artifacts: list[dict[str, Any]] = []
        self.metadata = metadata
        self.state: str = TaskState.SUBMITTED
        self.status: dict[str, Any] = {"state": self.state, "timestamp": utc_timestamp()}
        self.updated_ns = time.time_ns()
        #: Who watches the task and who waits for it: tuples, replaced, never changed in
        #: place; most tasks have none, and the empty tuple is one object for them all
        #: (two lists a task were two more objects for the collector to walk, kept as
        #: long as the task is).
        self.subscribers: tuple[asyncio.Queue[StreamEvent | None], ...] = ()
        self.waiters: tuple[tuple[asyncio.Future[None], bool], ...] = ()
        self.runner: asyncio.Task[None] | None = None
        self.input_waiter: asyncio.Future[dict[str, Any]] | None = None
        #: Whether the task was shown to anyone; a task never shown may answer a blocking
        #: SendMessage with a Message alone (task.reply) and leave no task behind.
        self.revealed = False
        self.reply: dict[str, Any] | None = None
        #: Estimated bytes held (``json_weight``), grown as messages and artifacts arrive.
        self.size = _RECORD_WEIGHT + json_weight(self.first_message)
        #: How many member calls deep the task is (0: an operator's or a client's), and
        #: the bounded call that made it (gateway.auth.edge_limits), told when it ends.
        self.depth = 0
        self.edge: EdgeCall | None = None
        if metadata:
            self.size += json_weight(metadata)

    @classmethod
    def restored(cls, task: dict[str, Any], caller: Caller) -> TaskRecord:
        """A task an earlier session of this member kept (``tasks.db``), as it was then:
        ``task`` is its A2A Task, ``caller`` stands for its owner. It never runs again."""
        history = [m for m in task.get("history", ()) if isinstance(m, dict)]
        found = task.get("status")
        status: dict[str, Any] = found if isinstance(found, dict) else {}
        record = cls({"messageId": new_id(), "role": "ROLE_USER", "parts": [],
                      "contextId": str(task.get("contextId") or new_id())}, caller, None)
        record.id = str(task["id"])
        record.first_message = history[0] if history else record.first_message
        record.history = history
        record.artifacts = [a for a in task.get("artifacts", ()) if isinstance(a, dict)]
        metadata = task.get("metadata")
        record.metadata = metadata if isinstance(metadata, dict) and metadata else None
        record.state = str(status.get("state") or TaskState.FAILED)
        record.status = status or {"state": record.state, "timestamp": utc_timestamp()}
        record.revealed = True   # it was kept: somebody may ask for it
        record.size = _RECORD_WEIGHT + json_weight(history) + json_weight(record.artifacts)
        return record

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def snapshot(self, history_length: int | None = None, *,
                 include_artifacts: bool = True) -> dict[str, Any]:
        """The Task as A2A sends it; ``history_length`` None means all of the history."""
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id,
                                "status": self.status}
        if include_artifacts and self.artifacts:
            task["artifacts"] = list(self.artifacts)
        if history_length is None:
            task["history"] = list(self.history)
        elif history_length > 0:
            task["history"] = self.history[-history_length:]
        if self.metadata:
            task["metadata"] = self.metadata
        return task


def answer_messages(record: TaskRecord) -> list[dict[str, Any]]:
    """What the task answered beyond its history, as agent messages: one per artifact,
    so a later task in the context reads the whole exchange. An artifact streamed in
    chunks (a model member's answer) holds one text part per chunk: consecutive text
    parts are read as the one text they make."""
    return [{"messageId": artifact["artifactId"], "contextId": record.context_id,
             "taskId": record.id, "role": "ROLE_AGENT", "parts": _joined(artifact["parts"])}
            for artifact in record.artifacts if artifact.get("parts")]


def _joined(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    joined: list[dict[str, Any]] = []
    for part in parts:
        if joined and part.keys() == {"text"} and joined[-1].keys() == {"text"}:
            joined[-1] = {"text": joined[-1]["text"] + part["text"]}
        else:
            joined.append(part)
    return joined
