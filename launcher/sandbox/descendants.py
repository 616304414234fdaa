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
3. :func:`reap_orphans`: reap orphans that ended by themselves (no zombie piles up);
4. :func:`end_orphans` (the agent process or the upstream ended) and
   :func:`end_descendants` (this process ends): SIGKILL every process of each doomed
   subtree, parents before their children so none is left to fork again, reap what
   was re-parented here, and walk again until nothing is left, bounded in time.

The tree is read from ``/proc`` (every process's parent), so it needs no cgroup and no
privilege, for root and ordinary users alike. docs/isolation.md says what it covers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Final

_PR_SET_CHILD_SUBREAPER: Final = 36
#: How long ending a tree may take before what is left is let go (a fork bomb racing
#: the walk is the only thing that takes more than one pass).
END_SECONDS: Final = 3.0

_owned: set[int] = set()
_spared: set[int] = set()
_starting = 0
_subreaper = False


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


def spare(pid: int) -> None:
    """``pid`` is a child this process started, waits for, and which ends by itself
    when this process ends: never killed here (module docstring)."""
    _owned.add(pid)
    _spared.add(pid)


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """While a child is started across awaits (its pid not yet :func:`own`-ed), no
    orphan is reaped: it could be that child, whose status its starter waits for."""
    global _starting
    _starting += 1
    try:
        yield
    finally:
        _starting -= 1


# ------------------------------------------------------------------ the tree


def _parents() -> dict[int, int]:
    """Every process's parent, from ``/proc/<pid>/stat``."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # gone meanwhile
        # field 2, the command, may hold ") ": the fields after it follow the LAST ")"
        rest = data[data.rfind(b")") + 2:].split(b" ", 2)
        if len(rest) >= 2:
            parents[int(name)] = int(rest[1])
    return parents


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


# ------------------------------------------------------------------ ending it


def reap_orphans() -> int:
    """Reap every orphan child that has ended; how many were reaped."""
    if _starting or not _subreaper:
        return 0
    reaped = 0
    for pid in _doomed_children(False, _parents()):
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            reaped += done == pid
    return reaped


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
    while True:
        parents = _parents()
        roots = _doomed_children(everything, parents)
        if not roots:
            return frozenset(killed)
        for pid in _subtrees(roots, parents):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        for pid in roots:  # what they held is re-parented here, to be found next pass
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    _owned.discard(pid)
        if time.monotonic() >= until:
            return frozenset(killed)
        time.sleep(0.005)
