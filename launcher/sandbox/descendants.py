"""Every process agent code starts ends with the ``mur`` process that owns it.

Agent code that forks, calls ``setsid()`` and forks again leaves a process that no
process group, session or ``PR_SET_PDEATHSIG`` reaches. So, in this order:

1. :func:`owning_descendants`: while the member runtime (or the launcher) runs, it is a
   child subreaper (``PR_SET_CHILD_SUBREAPER``), so a process orphaned anywhere below
   it is re-parented to it, not to init: it stays in the tree this module walks. Only
   a process that is one ends or reaps anything here, and it stops being one when its
   run is over (a launch run inside a test's own process leaves the test's children
   alone);
2. :func:`own` and :func:`release`: the children this process started on purpose (the
   agent process, a gateway upstream), which the code that started them waits for;
   every other child is an orphan agent code left behind; :func:`spare`: a child of
   this process's own that ends by itself when this process ends (the ``tasks.db``
   writer, which ends when its pipe does after committing what it read): never killed
   here, even by :func:`end_descendants`;
3. :func:`reap_orphans` (on ``SIGCHLD``): reap orphans that ended by themselves, so no
   zombie piles up, without reading ``/proc``: ``waitid(P_ALL, WNOWAIT)`` names an
   ended child without reaping it; one not owned is reaped, and the next is asked for,
   until none is left, a batch is done (the caller runs it again) or an owned child is
   next (its starter reaps it, and :func:`release` then runs this again). A process
   forking every few milliseconds costs two system calls per orphan, not a walk of
   every process on the machine;
4. :func:`end_orphans` (the agent process or the upstream ended) and
   :func:`end_descendants` (this process ends): the one place ``/proc`` is walked.
   SIGKILL every process of each doomed subtree, parents before their children so none
   is left to fork again (and, in one call, each process group of a session whose
   every process is doomed: a fork racing the walk is killed with its group), reap
   what was re-parented here, and walk again until nothing is left, bounded in rounds
   and in time so a process forking as fast as it can never holds the ending up.

The tree is read from ``/proc`` (every process's parent, process group and session), so
it needs no cgroup and no privilege, for root and ordinary users alike; where the agent
side has a cgroup, its owner ends it first with one write (``agent_cgroup.py``), and the
walk finds what is left. docs/isolation.md says what it covers and what it costs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

_PR_SET_CHILD_SUBREAPER: Final = 36
#: How long ending a tree may take before what is left is let go (a fork bomb racing
#: the walk is the only thing that takes more than one pass).
END_SECONDS: Final = 3.0
#: How many walks of ``/proc`` ending a tree may take, whatever the time left.
END_ROUNDS: Final = 40
#: Orphans reaped by one :func:`reap_orphans` before it hands the event loop back.
REAP_BATCH: Final = 256

_owned: set[int] = set()
_spared: set[int] = set()
_starting = 0
_subreaper = False
#: An owned child that ended and was next in line when :func:`reap_orphans` stopped:
#: orphans that ended after it are reaped when its starter releases it.
_held_by: int | None = None
#: Whether :func:`reap_orphans` was asked while a child was starting.
_deferred = False
# One reaper at a time: the event loop's, an ending's thread, the watchdog's.
_reaping = threading.RLock()


@contextlib.contextmanager
def owning_descendants() -> Iterator[bool]:
    """This process is the child subreaper of everything below it while the block runs
    (Linux; whether it is); at the end, whatever is left below it is ended."""
    global _subreaper
    _subreaper = _set_subreaper(1)
    try:
        yield _subreaper
    finally:
        end_descendants()
        if _subreaper:
            _set_subreaper(0)
            _subreaper = False


def owning() -> bool:
    """Whether this process owns what runs below it now (inside
    :func:`owning_descendants`)."""
    return _subreaper


def _set_subreaper(value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    return int(libc.prctl(ctypes.c_int(_PR_SET_CHILD_SUBREAPER), ctypes.c_ulong(value),
                          zero, zero, zero)) == 0


def own(pid: int) -> None:
    """``pid`` is a child this process started and will wait for itself."""
    _owned.add(pid)


def release(pid: int) -> None:
    """``pid`` was waited for by the code that started it."""
    _owned.discard(pid)
    _spared.discard(pid)
    if pid == _held_by:  # orphans that ended behind it were left for now
        reap_orphans()


def spare(pid: int) -> None:
    """``pid`` is a child this process started, waits for, and which ends by itself
    when this process ends: never killed here (module docstring)."""
    _owned.add(pid)
    _spared.add(pid)


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """While a child is started across awaits (its pid not yet :func:`own`-ed), no
    orphan is reaped: it could be that child, whose status its starter waits for."""
    global _starting, _deferred
    _starting += 1
    try:
        yield
    finally:
        _starting -= 1
        if not _starting and _deferred:
            _deferred = False
            reap_orphans()


# ------------------------------------------------------------------ reaping


def reap_orphans() -> bool:
    """Reap orphan children that have ended, reading no ``/proc`` (module docstring,
    step 3); whether more may be left (a batch was done: call it again)."""
    global _deferred
    if not _subreaper:
        return False
    if _starting:
        _deferred = True
        return False
    with _reaping:
        return _reap_ended(REAP_BATCH) >= REAP_BATCH


def _reap_ended(limit: int) -> int:
    """Reap ended children this process does not own until none is left, an owned one
    is next or ``limit`` were reaped; how many."""
    global _held_by
    _held_by = None
    reaped = 0
    while reaped < limit:
        try:
            # WNOWAIT: the child stays waitable, for its starter if it owns it
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped  # no child at all
        if ended is None or ended.si_pid == 0:
            return reaped
        pid = ended.si_pid
        if pid in _owned:
            # waitid names this same child first until its starter reaps it
            _held_by = pid
            return reaped
        with contextlib.suppress(ChildProcessError):  # reaped by another meanwhile
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG)
        reaped += 1
    return reaped


# ------------------------------------------------------------------ the tree


class _Stat(NamedTuple):
    parent: int
    group: int
    session: int


def _table() -> dict[int, _Stat]:
    """Every process's parent, process group and session, from ``/proc/<pid>/stat``."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # gone meanwhile
        # field 2, the command, may hold ") ": the fields after it follow the LAST ")"
        rest = data[data.rfind(b")") + 2:].split(b" ", 5)
        if len(rest) >= 5:
            table[int(name)] = _Stat(int(rest[1]), int(rest[2]), int(rest[3]))
    return table


def _subtrees(roots: Iterable[int], parents: dict[int, int]) -> list[int]:
    """``roots`` and everything below them, each parent before its children."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    order, queue = [], list(roots)
    while queue:
        pid = queue.pop(0)
        order.append(pid)
        queue.extend(children.get(pid, ()))
    return order


def _doomed_children(everything: bool, parents: dict[int, int]) -> list[int]:
    me = os.getpid()
    return [pid for pid, parent in parents.items()
            if parent == me and pid not in _spared and (everything or pid not in _owned)]


def _doomed_groups(doomed: list[int], table: dict[int, _Stat]) -> set[int]:
    """The process groups of every session that holds doomed processes only (a daemon's
    ``setsid()``): a group is killed in one call, a child it forks meanwhile with it."""
    mine = table.get(os.getpid())
    doomed_set = set(doomed)
    sessions = {table[pid].session for pid in doomed if pid in table}
    for pid, stat in table.items():
        if stat.session in sessions and pid not in doomed_set:
            sessions.discard(stat.session)  # it holds a process that is not doomed
    if mine is not None:
        sessions -= {mine.session}
    return {table[pid].group for pid in doomed
            if pid in table and table[pid].session in sessions and table[pid].group > 1
            and (mine is None or table[pid].group != mine.group)}


# ------------------------------------------------------------------ ending it


def end_orphans(seconds: float = END_SECONDS) -> frozenset[int]:
    """Kill and reap every orphan subtree (children this process does not own); the
    processes killed."""
    return _end(False, seconds)


def end_descendants(seconds: float = END_SECONDS) -> frozenset[int]:
    """Kill and reap everything below this process; the processes killed."""
    return _end(True, seconds)


def _end(everything: bool, seconds: float) -> frozenset[int]:
    if not _subreaper or not os.path.isdir("/proc/self"):
        return frozenset()
    until = time.monotonic() + seconds
    killed: set[int] = set()
    for _ in range(END_ROUNDS):
        table = _table()
        parents = {pid: stat.parent for pid, stat in table.items()}
        roots = _doomed_children(everything, parents)
        if not roots:
            break
        doomed = _subtrees(roots, parents)
        for group in _doomed_groups(doomed, table):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        # What they held is re-parented here, to be found next pass; what has ended
        # (these roots, orphans of the flood) is reaped now.
        for pid in roots:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    _owned.discard(pid)
        with _reaping:
            _reap_ended(len(table) + REAP_BATCH)
        if time.monotonic() >= until:
            break
        time.sleep(0.005)
    return frozenset(killed)
