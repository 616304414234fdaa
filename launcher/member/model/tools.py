"""What a model member's model may call, offered as chat-completions ``tools``.

In order: the runtime's two tools, built from what the task may do (``call_member``,
an enum of the callees, when the member may call someone; ``delegate``, an enum of the
granted capsules, when ``capabilities.spawn.allow`` names one), the declared ``command``
tools (:class:`CommandTools`), then :class:`Toolbox`, which offers them all and runs
one by name, returning :class:`ToolOutcome` (the text the model reads next, and how the
run went, for the ``tool_call`` record).

``call_member`` returns as soon as the callee's door holds the task; the answer is not
in the tool's result but arrives at the start of the model's next turn, fenced under
``member:<name>`` (the reference's rule, docs/llm.md). A command tool runs once per call
in a sandbox of its own nested in the agent process's (launcher/sandbox/tool_sandbox.py:
no read of the agent's ``/proc``, no signal to it), the model's ``input`` on its stdin,
its stdout the result; its environment is the agent's, which never holds the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from launcher.member.model.settings import CommandToolSpec
from launcher.sandbox.tool_sandbox import ToolSandbox

__all__ = ["CALL_MEMBER", "DELEGATE", "RUNTIME_TOOL_NAMES", "CommandTools", "ToolOutcome",
           "Toolbox", "tool_spec"]

CALL_MEMBER = "call_member"
DELEGATE = "delegate"
RUNTIME_TOOL_NAMES = frozenset({CALL_MEMBER, DELEGATE})
#: The most of a tool's output the model reads.
OUTPUT_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    outcome: str = "ok"         # ok, failed or refused
    seconds: float = 0.0


class ToolSource(Protocol):
    """A family of declared tools (command tools; MCP servers)."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def specs(self) -> list[dict[str, Any]]: ...

    def names(self) -> set[str]: ...

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...


def tool_spec(name: str, description: str, properties: dict[str, Any],
              required: Sequence[str]) -> dict[str, Any]:
    """One chat-completions tool."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(required)}}}


def _runtime_specs(callees: Sequence[str], capsules: Sequence[str]) -> list[dict[str, Any]]:
    specs = []
    if callees:
        specs.append(tool_spec(
            CALL_MEMBER, "Give a task to another member of the formation. Returns as soon "
            "as the member holds the task; its answer arrives at the start of your next "
            "turn, fenced under member:<name>. State the task in full: the member knows "
            "nothing else of your work.",
            {"member": {"type": "string", "enum": list(callees),
                        "description": "the member's roster name"},
             "task": {"type": "string", "description": "the task, stated in full"}},
            ("member", "task")))
    if capsules:
        specs.append(tool_spec(
            DELEGATE, "Start a child session of a capsule and give it a task. Its answer "
            "arrives at the start of your next turn, fenced under child:<name>.",
            {"capsule": {"type": "string", "enum": list(capsules),
                         "description": "the capsule, as the grant names it"},
             "task": {"type": "string", "description": "the task, stated in full"}},
            ("capsule", "task")))
    return specs


# --- command tools ---------------------------------------------------------------------


class CommandTools:
    """The declared ``command`` tools: one process per call."""

    def __init__(self, tools: Sequence[CommandToolSpec], *, cwd: str | None,
                 environ: Mapping[str, str], sandbox: ToolSandbox | None = None) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._cwd = cwd
        self._environ = dict(environ)
        #: Each run's own sandbox, nested in the agent's (None: not confined).
        self._sandbox = sandbox

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def specs(self) -> list[dict[str, Any]]:
        return [tool_spec(tool.name, tool.description or f"Runs {tool.argv[0]}.",
                          {"input": {"type": "string",
                                     "description": "the text the program reads on stdin"}},
                          ()) for tool in self._tools.values()]

    def names(self) -> set[str]:
        return set(self._tools)

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self._tools[name]
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *tool.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=self._cwd, env=self._environ,
                start_new_session=True,
                preexec_fn=None if self._sandbox is None else self._sandbox.preexec())
        except OSError as exc:
            return ToolOutcome(f"the tool {name} could not start: {exc.strerror or exc}",
                               "failed", time.monotonic() - started)
        text = str(arguments.get("input", ""))
        try:
            out, err = await asyncio.wait_for(process.communicate(text.encode()),
                                              tool.timeout)
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            return ToolOutcome(f"the tool {name} took longer than {tool.timeout:g} s and "
                               "was stopped", "failed", time.monotonic() - started)
        except asyncio.CancelledError:
            _kill_group(process.pid)
            raise
        seconds = time.monotonic() - started
        if process.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-2000:]
            return ToolOutcome(f"the tool {name} exited {process.returncode}: {tail}",
                               "failed", seconds)
        return ToolOutcome(_bounded(out.decode("utf-8", "replace")), "ok", seconds)


def _placed(member: str, handle: Any) -> str:
    """What the model reads of a placed call: never an id the call does not have (a busy
    member's call is offered again until it takes it; a member may answer at once)."""
    if getattr(handle, "state", "") == "offering":
        where = f"{member} is busy: the task is offered to it again until it takes it"
    elif handle.task_id is None:
        where = f"{member} answered at once"
    else:
        where = f"{member} holds the task (id {handle.task_id})"
    return where + "; its answer arrives at the start of your next turn."


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _bounded(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return text[:OUTPUT_LIMIT] + f"\n[… {len(text) - OUTPUT_LIMIT} more characters cut]"


# --- the toolbox of one task --------------------------------------------------------------


class Toolbox:
    """Every tool one task's model may call, and running one."""

    def __init__(self, task: Any, sources: Sequence[ToolSource], *,
                 callees: Sequence[str] = (), capsules: Sequence[str] = ()) -> None:
        self._task = task
        self._sources = list(sources)
        self._callees = tuple(callees)
        self._capsules = tuple(capsules)
        #: The calls and children this task's model started (their answers are read by
        #: the runtime at the end of the turn).
        self.started = 0

    def specs(self) -> list[dict[str, Any]]:
        specs = _runtime_specs(self._callees, self._capsules)
        for source in self._sources:
            specs.extend(source.specs())
        return specs

    async def run(self, name: str, arguments_text: str) -> ToolOutcome:
        """Run ``name``; a tool the model got wrong is a result it reads, never a crash."""
        try:
            arguments = json.loads(arguments_text or "{}")
        except ValueError:
            return ToolOutcome(f"the arguments of {name} are not JSON", "refused")
        if not isinstance(arguments, dict):
            return ToolOutcome(f"the arguments of {name} must be an object", "refused")
        if name == CALL_MEMBER and self._callees:
            return await self._call_member(arguments)
        if name == DELEGATE and self._capsules:
            return await self._delegate(arguments)
        for source in self._sources:
            if name in source.names():
                return await source.run(name, arguments)
        return ToolOutcome(f"there is no tool named {name!r}", "refused")

    async def _call_member(self, arguments: dict[str, Any]) -> ToolOutcome:
        member, text = str(arguments.get("member", "")), str(arguments.get("task", ""))
        started = time.monotonic()
        try:
            handle = await self._task.call_member(member, text)
        except Exception as failure:  # noqa: BLE001 - CallFailed and its kin: the model reads it
            return ToolOutcome(str(failure), "refused", time.monotonic() - started)
        self.started += 1
        return ToolOutcome(_placed(member, handle), "ok", time.monotonic() - started)

    async def _delegate(self, arguments: dict[str, Any]) -> ToolOutcome:
        capsule, text = str(arguments.get("capsule", "")), str(arguments.get("task", ""))
        started = time.monotonic()
        try:
            child = await self._task.delegate(capsule, text)
        except Exception as failure:  # noqa: BLE001 - DelegationRefused: the model reads it
            return ToolOutcome(str(failure), "refused", time.monotonic() - started)
        self.started += 1
        return ToolOutcome(f"{child.member} holds the task; its answer arrives at the start "
                           "of your next turn.", "ok", time.monotonic() - started)
