"""The hard edges of a member's ending: signals, the lifeline watchdog, the protocol stdout.

* :class:`SignalGuard`: the first ``SIGTERM`` starts the wind-down; a second one exits
  with status 143 at once, wherever the wind-down is. Without a lifeline, ``SIGINT`` and
  ``SIGHUP`` count as ``SIGTERM``; a member holding a lifeline leaves them to its
  launcher (a Ctrl-C reaches the launcher's whole process group, and the launcher ends
  the formation by closing the lifelines). ``SIGCHLD`` runs the orphan reaper
  (launcher/sandbox/descendants.py) once per turn of the event loop, however many came.
* :class:`Watchdog`: 20 seconds after the lifeline closed the member exits with status
  143 wherever its teardown is; a thread, so a blocked event loop cannot hold it up.
* :class:`ProtocolOut`: the readiness line and the ``--task`` result are the only
  things on stdout; everything else this process (or its agent) writes to descriptor 1
  goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from launcher.sandbox.agent_cgroup import remove_all
from launcher.sandbox.descendants import end_descendants
from launcher.spawn.env_names import LIFELINE_GRACE_ENV

#: Exit status of a member forced to stop (a second SIGTERM, the lifeline watchdog).
FORCED_EXIT = 143
#: Seconds from the lifeline closing to the forced exit (the roster format's 20 s).
LIFELINE_GRACE = 20.0
#: Tests only: a shorter grace, in seconds (documented in docs/member-runtime.md).

ExitFn = Callable[[int], Any]


def lifeline_grace(environ: dict[str, str] | os._Environ[str]) -> float:
    value = environ.get(LIFELINE_GRACE_ENV)
    if value:
        with contextlib.suppress(ValueError):
            grace = float(value)
            if 0 < grace <= LIFELINE_GRACE:
                return grace
    return LIFELINE_GRACE


def _left_to_the_launcher(signum: int, frame: FrameType | None) -> None:
    """A member holding a lifeline ends when its launcher closes it."""


_forced: int | None = None


def hard_exit(status: int) -> None:
    """End the process at once with ``status``: nothing more is flushed or written, but
    what agent code started ends first (its cgroup, then whatever is below this process:
    nothing it started outlives it, docs/isolation.md). The status is noted first: the
    agent process ending may let the session's own teardown finish meanwhile (this runs
    in the watchdog's thread), and that ending exits with it too (:func:`forced_status`)."""
    global _forced
    _forced = status
    with contextlib.suppress(Exception):
        remove_all(seconds=0.5)
        end_descendants(seconds=0.5)
    os._exit(status)


def forced_status() -> int | None:
    """The status a hard exit under way ends with, if one is."""
    return _forced


class SignalGuard:
    """Python-level handlers (``signal.signal``), so they run even while agent code keeps
    the event loop busy. ``on_first(signum)`` is scheduled on ``loop`` once;
    ``on_child()``, when given, after ``SIGCHLD``: once per turn of the loop however many
    came meanwhile (a process forking every few milliseconds sends hundreds a second),
    and again at once while it returns True (more may be left)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_first: Callable[[int], None], *,
                 with_interrupts: bool = True, exit_fn: ExitFn = hard_exit,
                 on_child: Callable[[], bool] | None = None) -> None:
        self._loop = loop
        self._on_first = on_first
        self._on_child = on_child
        #: Whether a run of ``on_child`` is scheduled and has not started yet.
        self._child_due = False
        self._exit = exit_fn
        self.count = 0
        self.signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)
        if with_interrupts:
            self.signals += (signal.SIGINT, signal.SIGHUP)
        self._ignored: tuple[signal.Signals, ...] = (
            () if with_interrupts else (signal.SIGINT, signal.SIGHUP))
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        for signum in self._ignored:
            # A handler that does nothing rather than SIG_IGN: an ignored signal stays
            # ignored in the processes the agent starts, a handled one does not.
            self._previous[signum] = signal.signal(signum, _left_to_the_launcher)
        if self._on_child is not None:
            self._previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._child)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count >= 2:
            self._exit(FORCED_EXIT)
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self._loop.call_soon_threadsafe(self._on_first, signum)

    def _child(self, signum: int, frame: FrameType | None) -> None:
        self._schedule_child()

    def _schedule_child(self) -> None:
        if self._child_due:  # the run already scheduled sees this child too
            return
        self._child_due = True
        try:
            self._loop.call_soon_threadsafe(self._run_child)
        except RuntimeError:  # the loop is already closed
            self._child_due = False

    def _run_child(self) -> None:
        assert self._on_child is not None
        # Cleared first: a SIGCHLD that comes while it runs schedules one more run.
        self._child_due = False
        if self._on_child():
            self._schedule_child()


class Watchdog:
    """Exit with status 143 ``grace`` seconds after :meth:`arm`, unless :meth:`disarm`."""

    def __init__(self, grace: float, *, exit_fn: ExitFn = hard_exit) -> None:
        self.grace = grace
        self._exit = exit_fn
        self._timer: threading.Timer | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.grace, self._exit, args=(FORCED_EXIT,))
            self._timer.daemon = True
            self._timer.name = "murmur-lifeline-watchdog"
            self._timer.start()

    def disarm(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


class ProtocolOut:
    """This process's stdout for the readiness line and the result, and nothing else.

    Descriptor 1 is kept as a private (non-inheritable) copy and then pointed at
    stderr, so a ``print`` in agent code, a library's chatter or a child process can
    never come before the readiness line or inside the result. A write to a reader that
    is gone is dropped.
    """

    def __init__(self, stdout_fd: int = 1, stderr_fd: int = 2) -> None:
        self._fd = os.dup(stdout_fd)
        os.dup2(stderr_fd, stdout_fd)
        self._stdout_fd = stdout_fd

    @property
    def fd(self) -> int:
        return self._fd

    def line(self, text: str) -> bool:
        """Write ``text`` and a newline (when it has none); False when nobody reads."""
        data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            return False
        return True

    def follow_stderr(self, stderr_fd: int = 2) -> None:
        """Point descriptor 1 at stderr again (after stderr was moved to a log)."""
        with contextlib.suppress(OSError):
            os.dup2(stderr_fd, self._stdout_fd)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
