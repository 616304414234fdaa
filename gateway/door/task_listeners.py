"""Who hears of a door's tasks: :class:`TaskListeners`, shared by a door's own tasks
(:class:`gateway.door.tasks.TaskStore`) and a gateway member's (the relay). In order:
the stop listeners (the session should end, once, the first reason winning), then the
task-end listeners (each final Task), each listener's failure logged and never passed
on."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["JournaledTask", "KeptTask", "TaskJournal", "TaskListener", "TaskListeners"]

log = logging.getLogger("murmur.door")

TaskListener = Callable[[dict[str, Any]], None]


class JournaledTask(Protocol):
    """What a journal reads of a task when it writes it (a door's ``TaskRecord``)."""

    id: str
    owner: str
    #: When its state last changed (``time.time_ns()``): the age its bound goes by.
    updated_ns: int

    @property
    def terminal(self) -> bool: ...

    def snapshot(self) -> dict[str, Any]: ...


class KeptTask(Protocol):
    """A task an earlier session of the member kept (``tasks.db``), for a door to start
    with: its owner's name, the A2A Task, when its state last changed."""

    @property
    def owner(self) -> str: ...

    @property
    def task(self) -> dict[str, Any]: ...

    @property
    def updated_ns(self) -> int: ...


class TaskJournal(Protocol):
    """Where a door's tasks are kept beyond its process (the launcher's ``tasks.db``):
    told that a task changed, it must return at once (the request path waits); it reads
    the task's state (``snapshot()``) when it writes, off the request path."""

    def put(self, task: JournaledTask) -> None:
        """``task`` changed: write its latest state soon."""


class TaskListeners:
    """Who hears that the session should stop, and of each task that ends: the same for
    a door's own tasks (:class:`TaskStore`) and a gateway member's (the relay)."""

    def __init__(self) -> None:
        self._stop_listeners: list[Callable[[str], None]] = []
        self._task_listeners: list[TaskListener] = []
        self._stop_reason: str | None = None

    def on_stop(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(reason)`` once when the session is asked to stop."""
        self._stop_listeners.append(listener)

    def on_task_end(self, listener: TaskListener) -> None:
        """Call ``listener(task)`` with the final Task each time a task ends."""
        self._task_listeners.append(listener)

    def request_stop(self, reason: str) -> None:
        """Ask the session to stop (the first reason wins; later requests change nothing)."""
        if self._stop_reason is not None:
            return
        self._stop_reason = reason
        for listener in self._stop_listeners:
            try:
                listener(reason)
            except Exception:  # every listener hears of the stop
                log.exception("stop listener %r failed", listener)

    def tell_task_end(self, final: dict[str, Any]) -> None:
        """Every task-end listener hears of ``final``, whichever of them fails."""
        for listener in self._task_listeners:
            try:
                listener(final)
            except Exception:  # a listener's failure must not stop the task's end
                log.exception("task-end listener %r failed", listener)
