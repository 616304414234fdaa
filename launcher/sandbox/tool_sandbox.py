"""A model member's tools in a sandbox of their own, nested in the agent process's.

A tool (a ``command`` tool, an MCP server) is code the model steers; the agent process
is the driver that holds the task's conversation. A tool must not reach it: no read of
its ``/proc/<pid>`` (its memory, its environment), no signal to it (docs/isolation.md).
So every tool process confines itself once more, between its fork and its exec, with a
Landlock domain of its own nested in the agent's: the agent's grants without the agent's
own ``/proc/<pid>``, and, where the kernel scopes signals (ABI 6), no signal to any
process outside the new domain, its parent included (a tool may signal only what it
started). The seccomp filter (no ``ptrace``, no ``process_vm_readv``) and the agent's
non-dumpable state are inherited and hold besides.

In order: :class:`ToolSandbox` (the plan, and its ruleset built once in the agent
process); :meth:`ToolSandbox.preexec`, for a process this code starts itself (a command
tool: the child applies the ruleset, nothing else); :meth:`ToolSandbox.argv`, for one the
``mcp`` package starts (it takes no ``preexec_fn``): ``python -I -m
launcher.sandbox.tool_sandbox PLAN -- ARGV...``, this module's ``__main__``, which builds
the same ruleset, applies it and executes ``ARGV``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.sandbox.landlock import (
    Confinement,
    HostSupport,
    build_ruleset,
    host_support,
    restrict_self,
)

__all__ = ["ToolSandbox"]


@dataclass(slots=True)
class ToolSandbox:
    """The grants of a tool: the agent's own, less its ``/proc/<pid>``."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    connect: tuple[int, ...]
    abi: int
    #: The ruleset, built on the first tool run and kept (close-on-exec) for the next.
    _built: int | None = field(default=None, repr=False)

    @classmethod
    def of(cls, plan: dict[str, Any] | None) -> ToolSandbox | None:
        """From the agent's confinement plan (the agent protocol's ``confine``); None when
        the agent is not confined or the kernel offers no Landlock."""
        if not plan:
            return None
        support = _support(plan.get("abi"))
        if not support.files:
            return None
        return cls(read=tuple(plan.get("read", ())), write=tuple(plan.get("write", ())),
                   connect=tuple(plan.get("connect", ())), abi=support.abi)

    def _ruleset(self) -> int:
        return build_ruleset(Confinement(read=self.read, write=self.write,
                                         connect_ports=self.connect), HostSupport(self.abi))

    def preexec(self) -> Callable[[], None]:
        """The child's step between fork and exec (the ruleset is built before the fork,
        and closed on exec)."""
        if self._built is None:
            self._built = self._ruleset()
        ruleset = self._built

        def confine() -> None:
            restrict_self(ruleset)

        return confine

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` behind this module's ``__main__``, which confines, then executes it."""
        plan = json.dumps({"read": self.read, "write": self.write, "connect": self.connect,
                           "abi": self.abi}, separators=(",", ":"))
        return [sys.executable, "-I", "-m", "launcher.sandbox.tool_sandbox", plan, "--",
                *argv]


def _support(asked: object) -> HostSupport:
    support = host_support()
    if isinstance(asked, int) and 0 <= asked < support.abi:
        return HostSupport(asked)
    return support


def main(args: Sequence[str]) -> None:
    """``PLAN -- ARGV...``: confine with PLAN, then become ARGV (never returns)."""
    if len(args) < 3 or args[1] != "--":
        sys.exit("usage: python -m launcher.sandbox.tool_sandbox PLAN -- PROGRAM [ARGS...]")
    plan = json.loads(args[0])
    sandbox = ToolSandbox(read=tuple(plan["read"]), write=tuple(plan["write"]),
                          connect=tuple(plan["connect"]), abi=int(plan["abi"]))
    ruleset = sandbox._ruleset()
    restrict_self(ruleset)
    os.close(ruleset)
    program = list(args[2:])
    try:
        os.execvp(program[0], program)  # noqa: S606 - the declared server, as argv
    except OSError as exc:
        sys.exit(f"{program[0]}: {exc.strerror or exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
