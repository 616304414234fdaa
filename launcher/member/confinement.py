"""What a member's agent code may touch: the Landlock plan of its agent process (and of a
gateway member's upstream), docs/isolation.md.

In this order: the paths every agent reads (the Python in use, its packages, system
libraries and programs, ``/etc``, a few devices), what the command's program runs from
(``launcher/sandbox/program_paths.py``: a framework's virtual environment and the Python
it was made with) and ``capabilities.filesystem.read``, the member's own paths (its
capsule, read; its session's ``home/``, ``tmp/``, ``out/`` and its work folder, read and
write),
then the ports (connect: the member's forward proxy; bind: a gateway upstream's own),
then whether the seccomp socket filter goes on too (``launcher/sandbox/seccomp.py``).
A path that holds ``MURMUR_HOME`` is never granted (granting it would grant every
session's records): it is left out and named in :attr:`AgentPlan.withheld`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Programs and libraries of the system, and its configuration (read, execute).
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt",
               "/dev/urandom", "/dev/random", "/dev/zero")
#: Devices every program writes.
SYSTEM_WRITE = ("/dev/null", "/dev/tty", "/dev/full")


@dataclass(frozen=True)
class AgentPlan:
    """The agent process's confinement, as the agent protocol's ``start`` carries it."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    connect: tuple[int, ...]
    bind: tuple[int, ...] = ()
    withheld: tuple[str, ...] = field(default=())
    #: Whether the seccomp socket filter is installed too (where the host offers it).
    seccomp: bool = False

    def wire(self) -> dict[str, Any]:
        return {"read": list(self.read), "write": list(self.write),
                "connect": list(self.connect), "bind": list(self.bind),
                "seccomp": self.seccomp}


def python_paths() -> tuple[str, ...]:
    """The Python in use: its prefixes, every folder on ``sys.path``, its executable."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    found += [entry for entry in sys.path if entry and os.path.isdir(entry)]
    for package in ("launcher", "gateway"):
        module = sys.modules.get(package)
        location = getattr(module, "__file__", None)
        if location:
            found.append(os.path.dirname(os.path.dirname(os.path.realpath(location))))
    return tuple(dict.fromkeys(os.path.realpath(path) for path in found))


def granted_already(path: str, *, capsule_dir: Path) -> bool:
    """Whether every agent reads ``path`` without asking: the system's folders, the
    Python in use, its capsule."""
    return any(_holds(root, path) for root in (*SYSTEM_READ, *python_paths(),
                                               os.path.realpath(capsule_dir)))


def agent_plan(*, home: Path, capsule_dir: Path, session_dirs: Iterable[Path],
               workdir: Path, proxy_port: int, bind_ports: Iterable[int] = (),
               seccomp: bool = False, also_read: Iterable[str] = ()) -> AgentPlan:
    """The plan of one member's agent process (see the module docstring); ``also_read``:
    the program's environment and ``capabilities.filesystem.read`` (read and execute)."""
    murmur_home = os.path.realpath(home)
    withheld: list[str] = []

    def grantable(paths: Iterable[str | Path]) -> tuple[str, ...]:
        kept = []
        for path in dict.fromkeys(os.path.realpath(item) for item in paths):
            if _holds(path, murmur_home):
                withheld.append(path)
            else:
                kept.append(path)
        return tuple(kept)

    read = grantable([*SYSTEM_READ, *python_paths(), *also_read])
    # The member's own: granted even under MURMUR_HOME (they are its own session's).
    own_read = (os.path.realpath(capsule_dir),)
    own_write = tuple(os.path.realpath(path) for path in session_dirs)
    write = grantable([workdir])
    return AgentPlan(read=read + own_read, write=SYSTEM_WRITE + own_write + write,
                     connect=(proxy_port,), bind=tuple(bind_ports),
                     withheld=tuple(withheld), seccomp=seccomp)


def _holds(path: str, inner: str) -> bool:
    """Whether ``path`` is ``inner`` or one of its parents."""
    return inner == path or inner.startswith(path.rstrip("/") + "/")
