"""A cgroup per member's agent side, where one can be made (docs/isolation.md, "Processes").

The subreaper (:mod:`launcher.sandbox.descendants`) ends what agent code leaves behind
everywhere, by walking ``/proc``. Where this process may make a cgroup v2 (root, or a
delegated subtree), the agent side also runs in a cgroup of its own, which the kernel
ends whole with one write: no walk, no race with a process forking while it is walked.

In this order: where this process's cgroup v2 directory is (the ``cgroup2`` mount in
``/proc/self/mountinfo``, the ``0::`` line of ``/proc/self/cgroup``);
:meth:`AgentCgroup.make`, ``murmur-<session>`` under it (None where it cannot be made:
the subreaper alone holds; first, the empty cgroups of sessions that no longer run, left
by runtimes killed with SIGKILL, are removed); :meth:`AgentCgroup.add` (the runtime moves its agent
process in before it runs any agent code) and :meth:`AgentCgroup.join_fd` (a gateway
upstream's child joins between fork and exec, before it is confined); :meth:`kill`
(``cgroup.kill``, then until ``cgroup.events`` says nothing is left, bounded);
:meth:`remove`; :func:`remove_all`, every cgroup this process made and has not removed
(a runtime ending at once, on a second SIGTERM). :func:`end_left_over` is the
launcher's: the cgroups of its members that are still there once every member has
stopped (a runtime killed with SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

PREFIX: Final = "murmur-"
#: How long a kill may take before the cgroup is left (its processes are dying).
KILL_SECONDS: Final = 2.0


def cgroup_root() -> Path | None:
    """This process's cgroup v2 directory, or None (no cgroup v2 mounted)."""
    mount = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                dash = fields.index("-") if "-" in fields else -1
                if dash > 0 and fields[dash + 1] == "cgroup2":
                    mount = fields[4]
                    break
        if mount is None:
            return None
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("0::"):
                    inner = line[3:].strip().lstrip("/")
                    return Path(mount) / inner
    except OSError:
        return None
    return None


class AgentCgroup:
    """One session's agent-side cgroup (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"AgentCgroup({str(self.path)!r})"

    @classmethod
    def make(cls, session_id: str, root: Path | None = None) -> AgentCgroup | None:
        """The session's cgroup, made now; None where this process may not make one."""
        root = root if root is not None else cgroup_root()
        if root is None:
            return None
        _sweep(root)
        path = root / f"{PREFIX}{session_id}"
        try:
            path.mkdir(mode=0o755)
        except OSError:
            return None
        if not (path / "cgroup.kill").exists():  # a kernel before 5.14: no one-write end
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        made = cls(path)
        _made.add(made)
        return made

    def add(self, pid: int) -> bool:
        """Move ``pid`` in; whether it was moved."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            return False
        return True

    def join_fd(self) -> int:
        """A descriptor of ``cgroup.procs`` (close-on-exec) that a child writes ``0``
        to, between fork and exec, to join: one ``write``, no allocation."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def populated(self) -> bool:
        try:
            text = (self.path / "cgroup.events").read_text()
        except OSError:
            return False
        return "populated 1" in text

    def kill(self, seconds: float = KILL_SECONDS) -> frozenset[int]:
        """End every process in it, and wait (bounded) until none is left; the
        processes it held."""
        if not self.populated():
            return frozenset()
        try:
            held = frozenset(int(pid) for pid in
                             (self.path / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            held = frozenset()
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        until = time.monotonic() + seconds
        while self.populated() and time.monotonic() < until:
            time.sleep(0.005)
        return held

    def remove(self, seconds: float = KILL_SECONDS) -> None:
        """Kill what is left, then remove it (a cgroup still dying is left behind)."""
        _made.discard(self)
        self.kill(seconds)
        with contextlib.suppress(OSError):
            self.path.rmdir()


_made: set[AgentCgroup] = set()


def remove_all(seconds: float = KILL_SECONDS) -> None:
    """Kill and remove every cgroup this process made and has not removed."""
    for cgroup in list(_made):
        cgroup.remove(seconds)


#: An empty cgroup younger than this is never swept (its session may be starting).
STALE_SECONDS: Final = 60.0


def _sweep(root: Path) -> None:
    """Remove the empty ``murmur-<session>`` cgroups of sessions that no longer run."""
    from launcher.home.running_records import is_running

    try:
        entries = [entry for entry in os.scandir(root)
                   if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        cgroup = AgentCgroup(Path(entry.path))
        with contextlib.suppress(OSError, ValueError):
            if (now - entry.stat().st_mtime > STALE_SECONDS and not cgroup.populated()
                    and not is_running(entry.name[len(PREFIX):])):
                os.rmdir(entry.path)


def end_left_over(session_ids: Iterable[str], root: Path | None = None) -> int:
    """Kill and remove the cgroups of ``session_ids`` that are still there; how many."""
    root = root if root is not None else cgroup_root()
    if root is None:
        return 0
    ended = 0
    for session_id in session_ids:
        path = root / f"{PREFIX}{session_id}"
        if path.is_dir():
            AgentCgroup(path).remove()
            ended += 1
    return ended
