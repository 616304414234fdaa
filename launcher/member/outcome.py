"""How a member's session ends: its causes, its exit status and code, its ``result.txt``.

docs/member-runtime.md ("How a session ends") gives every row; the
first cause wins and later ones change nothing:

======================  ==================  ================================  =====
cause                   a task was running  ``session_end.exit_status``, code  exit
======================  ==================  ================================  =====
first SIGTERM, or       yes                 ``canceled``, ``E-RUN-040``       1
``murmur.StopSession``  no                  ``ok``                            0
lifeline closed         yes                 ``formation_ended``               0
                        no                  ``ok``                            0
spawner lifeline        yes                 ``spawner_ended``                 0
closed (a child)        no                  ``ok``                            0
``--deadline``          either              ``deadline_reached``, E-RUN-053   1
``--task`` ended        (its state)         ``ok`` / ``failed`` / ``canceled`` 0 / 1
                                            / ``rejected``, ``E-RUN-041``
``after_task: exit``,   no                  ``ok``                            0
idle timeout
a failure to start      either              ``failed``, its code              1
======================  ==================  ================================  =====

A file the session cannot write is :func:`file_not_written` (``E-RUN-048``); a ``--task``
session whose final ``result.txt`` cannot be written ends ``failed`` with it instead of
``ok``.
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.protocol import TaskState, state_word
from gateway.proxy.egress import answer_text, failure_text
from launcher.diagnostics import Diagnostic, diagnostic
from launcher.home.files import DISK_FULL_ERRNOS, write_problem
from launcher.spawn.process import escape_control

TASK_NOT_COMPLETED = "E-RUN-041"
DOOR_CREDENTIALS = "E-RUN-042"
CAPSULE_NOT_RUNNABLE = "E-RUN-043"
SESSION_NOT_STAGED = "E-RUN-044"
FILE_NOT_WRITTEN = "E-RUN-048"
UPSTREAM_NOT_READY = "E-RUN-049"
UPSTREAM_EXITED = "E-RUN-050"
TASK_DB_UNREADABLE = "E-RUN-067"

def member_diagnostic(code: str, path: str | None = None, **values: object) -> Diagnostic:
    """``code`` from the diagnostics table, filled with ``values``."""
    return diagnostic(code, path, **values)


def file_not_written(path: str | os.PathLike[str], exc: OSError, *, what: str,
                     note: str = "") -> Diagnostic:
    """``E-RUN-048`` for ``exc`` writing ``path``: what it is, the disk full said as such,
    and a fix fitting the error; ``note`` says what was done about it."""
    if exc.errno in DISK_FULL_ERRNOS:
        fix = "free space on the disk that holds it (or raise the quota), then run it again"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make its folder writable by this user, then run it again"
    else:
        fix = "see the error above; run it again"
    problem = write_problem(exc) + (f"; {note}" if note else "")
    return diagnostic(FILE_NOT_WRITTEN, str(path), what=what, file=os.fspath(path),
                      problem=problem, fix=fix)


class Cause(enum.Enum):
    """Why the session ends."""

    SIGNAL = "signal"
    STOP_SESSION = "stop_session"
    LIFELINE = "lifeline"
    #: A delegated child's spawner lifeline closed: the member that delegated ended.
    SPAWNER = "spawner"
    DEADLINE = "deadline"
    TASK_DONE = "task"
    AFTER_TASK = "after_task"
    IDLE_TIMEOUT = "idle_timeout"
    FAILURE = "failure"


#: The status message of tasks canceled because the session ends this way: it is what
#: ``result.txt``'s ``canceled:`` line says.
CANCEL_REASONS: dict[Cause, str] = {
    Cause.SIGNAL: "the session was stopped by a signal",
    Cause.STOP_SESSION: "the session was stopped (murmur.StopSession)",
    Cause.LIFELINE: "the formation ended",
    Cause.SPAWNER: "the member that delegated this task ended",
    Cause.DEADLINE: "the deadline was reached",
    Cause.TASK_DONE: "the session's task ended",
    Cause.AFTER_TASK: "the session ended after its task",
    Cause.IDLE_TIMEOUT: "the session ended after its idle timeout",
    Cause.FAILURE: "the session failed",
}


@dataclass(frozen=True)
class Ending:
    """The first cause, and the tasks that were running when it came."""

    cause: Cause
    running: tuple[str, ...] = ()
    detail: str = ""
    #: For ``Cause.FAILURE``: the diagnostic that ends the session.
    failure: Diagnostic | None = None


@dataclass(frozen=True)
class SessionOutcome:
    exit_code: int
    exit_status: str
    diagnostic: Diagnostic | None = None

    @property
    def code(self) -> str | None:
        return self.diagnostic.code if self.diagnostic is not None else None


def task_state(task: Mapping[str, Any]) -> str:
    status = task.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    return state if isinstance(state, str) else TaskState.UNSPECIFIED


def result_text(task: Mapping[str, Any]) -> str:
    """What ``out/result.txt`` holds for a task that ended: the answer of a completed
    task (docs/gateway.md, "The answer of a task"), else one ``<state>: <why>`` line
    (``canceled: the formation ended``)."""
    state = task_state(task)
    if state == TaskState.COMPLETED:
        return answer_text(task)
    why = " ".join(failure_text(task).split()) or f"the task was {state_word(state)}"
    return f"{state_word(state)}: {why}"


def decide(ending: Ending, *, session_id: str, deadline: str = "",
           task: Mapping[str, Any] | None = None, result_path: str = "") -> SessionOutcome:
    """The exit status, ``session_end`` status and diagnostic for ``ending``.

    ``task`` is the final Task of ``--task`` (for ``Cause.TASK_DONE``).
    """
    cause = ending.cause
    running = bool(ending.running)
    if cause is Cause.FAILURE:
        return SessionOutcome(1, "failed", ending.failure)
    if cause is Cause.DEADLINE:
        work = (f"; its work in flight was canceled (task {', '.join(ending.running)})"
                if running else "; no task was running")
        return SessionOutcome(1, "deadline_reached", diagnostic(
            "E-RUN-053", subject=f"session {session_id}", deadline=deadline, work=work))
    if cause in (Cause.SIGNAL, Cause.STOP_SESSION):
        if not running:
            return SessionOutcome(0, "ok")
        return SessionOutcome(1, "canceled", diagnostic(
            "E-RUN-040", session=session_id, task=", ".join(ending.running)))
    if cause is Cause.LIFELINE:
        return SessionOutcome(0, "formation_ended" if running else "ok")
    if cause is Cause.SPAWNER:
        return SessionOutcome(0, "spawner_ended" if running else "ok")
    if cause is Cause.TASK_DONE and task is not None:
        state = task_state(task)
        if state == TaskState.COMPLETED:
            return SessionOutcome(0, "ok")
        # The agent's reason, on the terminal in E-RUN-041: escaped, as it cannot write there.
        detail = escape_control(" ".join(failure_text(task).split())[:300]) or (
            "no reason was given")
        return SessionOutcome(1, state_word(state), member_diagnostic(
            TASK_NOT_COMPLETED, task=str(task.get("id", "")), session=session_id,
            state=state_word(state), detail=detail, result=result_path))
    return SessionOutcome(0, "ok")
