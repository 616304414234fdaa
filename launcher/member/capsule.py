"""A capsule's agent: loading it from the capsule directory, the TaskContext agent code
sees, the multi-turn loop, and the harness that runs a ``command`` agent.

* ``python: module:run`` is ``async def run(task) -> str | None``, called once per turn in
  the member's agent process (launcher/member/agent/) with a :class:`TaskContext`.
* ``command: [argv...]`` runs once per task: the task text on stdin, ``MURMUR_TASK_ID``,
  ``MURMUR_FORMATION_PEERS`` and the forward proxy's variables in its environment, its
  stdout the result; a non-zero exit fails the task; CancelTask
  terminates its process group (SIGTERM, then SIGKILL after a bound).

Both become a gateway ``AgentFn`` (``async (TaskRun) -> str | None``) for ``build_door``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Protocol

from pydantic import ValidationError

from gateway.a2a.models import Part
from gateway.door.task_record import message_text
from gateway.door.tasks import AgentFn, TaskRun
from launcher.errors import LauncherError
from launcher.spawn.env_names import TASK_ID_ENV

__all__ = [
    "AgentEnvironment", "CapsuleError", "MemberCallsLike", "Part", "TaskContext",
    "command_agent", "load_agent", "load_python_agent", "python_agent",
]

_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: How much of a failed command's stderr its failure message quotes.
STDERR_TAIL = 2000


class CapsuleError(LauncherError):
    """The capsule's agent cannot be loaded; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class AgentEnvironment:
    """What the runtime tells every task of this member (the same for all its tasks)."""

    member: str | None = None
    formation_id: str | None = None
    deadline: datetime | None = None
    workdir: Path | None = None
    home: Path | None = None
    tmp: Path | None = None
    #: The environment the agent sees: ``capabilities.env.allow`` plus
    #: ``MURMUR_FORMATION_PEERS``; never the runtime's own.
    env: Mapping[str, str] = field(default_factory=dict)
    #: ``inference.max_turns``: how many times ``run`` may be called for one task.
    max_turns: int = 8
    #: A ``command`` agent cancelled gets SIGTERM, then SIGKILL this many seconds later.
    terminate_grace: float = 5.0
    #: The session's ``MURMUR.md`` (launcher/member/instructions.py): the capsule's own
    #: instructions, then its Identity section.
    instructions: str = ""

    def wire(self) -> dict[str, Any]:
        """As the agent protocol's ``start`` carries it (launcher/member/agent/)."""
        return {"member": self.member, "formation_id": self.formation_id,
                "deadline": self.deadline.isoformat() if self.deadline else None,
                "workdir": _text(self.workdir), "home": _text(self.home),
                "tmp": _text(self.tmp), "env": dict(self.env), "max_turns": self.max_turns,
                "terminate_grace": self.terminate_grace, "instructions": self.instructions}


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


class MemberCallsLike(Protocol):
    """The calls of one running task (``gateway.proxy.call_member.MemberCalls``)."""

    peers: tuple[str, ...]
    http: Any

    @property
    def calls(self) -> tuple[Any, ...]: ...

    def unanswered(self) -> list[Any]: ...

    async def call_member(self, name: str, text: str) -> Any: ...

    async def answers(self, handles: Iterable[Any] | None = None) -> str: ...

    async def cancel_outstanding(self) -> None: ...

    async def aclose(self) -> None: ...


CallsFactory = Callable[[TaskRun], MemberCallsLike | None]
PythonRun = Callable[["TaskContext"], Awaitable[str | None]]


#: Why a task has no such attribute, for the AttributeError.
_WHY_MISSING = {
    "call_member": " (this member may call no other member)",
    "delegate": " (capabilities.spawn.allow names no capsule; docs/delegation.md)",
    "answers": " (this member may call no other member and delegate to no capsule)",
}


class TaskContext:
    """The ``task`` an agent's ``run(task)`` receives.

    ``call_member``, ``delegate``, ``answers`` and ``http`` exist only when the runtime
    gives the task a calls object; ``call_member`` only when the member may call someone,
    ``delegate`` only when ``capabilities.spawn.allow`` names a capsule, ``answers`` when
    either holds (reading them otherwise is an AttributeError, so
    ``hasattr(task, "delegate")`` tells an agent whether it can delegate).
    """

    def __init__(self, run: TaskRun, environment: AgentEnvironment,
                 calls: MemberCallsLike | None = None) -> None:
        self._run = run
        self._environment = environment
        self._calls = calls
        self._env = MappingProxyType(dict(environment.env))
        self.turn = 1
        #: The answers to the calls and children of the previous turns, fenced under
        #: ``member:<name>`` or ``child:<capsule-name>``; empty on the first turn.
        self.replies = ""

    # --- what the task is ------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def context_id(self) -> str:
        return self._run.context_id

    @property
    def message(self) -> dict[str, Any]:
        """The A2A Message that started the task (camelCase dict)."""
        return self._run.message

    @property
    def message_id(self) -> str:
        return self._run.message_id

    @property
    def text(self) -> str:
        """The task's text: the text parts of its message, joined by newlines."""
        return self._run.text

    @property
    def history(self) -> list[dict[str, Any]]:
        """The context's exchange before this task, oldest first (A2A messages: each
        earlier task's messages, then its answers as agent messages); empty in a new
        context. A follow-up in an earlier ``contextId`` reads the conversation so far,
        after ``mur run --resume`` too."""
        return self._run.history

    @property
    def origin(self) -> str:
        """``operator``, ``peer``, ``client`` or ``public``: from the caller's credential."""
        return self._run.caller.origin

    @property
    def trust(self) -> str:
        """``trusted`` or ``untrusted``: from the caller's credential."""
        return self._run.caller.trust

    @property
    def member(self) -> str | None:
        return self._environment.member

    @property
    def formation_id(self) -> str | None:
        return self._environment.formation_id

    @property
    def instructions(self) -> str:
        """The session's ``MURMUR.md``: the capsule's own instructions, then an
        ``## Identity`` section naming the capsule, this member's roster name and
        formation id (in a formation) and the members it may call."""
        return self._environment.instructions

    @property
    def deadline(self) -> datetime | None:
        return self._environment.deadline

    @property
    def workdir(self) -> Path | None:
        return self._environment.workdir

    @property
    def home(self) -> Path | None:
        return self._environment.home

    @property
    def tmp(self) -> Path | None:
        return self._environment.tmp

    @property
    def env(self) -> Mapping[str, str]:
        return self._env

    @property
    def max_turns(self) -> int:
        """``inference.max_turns``: how many turns this task may take (an agent that loops
        with a model bounds its own rounds by it too)."""
        return self._environment.max_turns

    @property
    def peers(self) -> tuple[str, ...]:
        """The members this task may call, in roster order (empty: nobody)."""
        return self._calls.peers if self._calls is not None else ()

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined above: the calls seam.
        calls = self.__dict__.get("_calls")
        if calls is not None:
            spawn = getattr(calls, "spawn", ())
            if (name == "http" or (name == "call_member" and calls.peers)
                    or (name == "delegate" and spawn)
                    or (name == "answers" and (calls.peers or spawn))):
                return getattr(calls, name)
        raise AttributeError(f"task has no attribute {name!r}" + _WHY_MISSING.get(name, ""))

    # --- what the agent does -----------------------------------------------------------

    async def status(self, text: str) -> None:
        """Report progress; the task stays working with ``text`` as its status message."""
        await self._run.status(str(text))

    async def artifact(self, parts: Any, *, name: str | None = None,
                       description: str | None = None, append: bool = False,
                       last_chunk: bool = False, artifact_id: str | None = None,
                       metadata: dict[str, Any] | None = None) -> str:
        """Add an artifact, or with ``append`` extend one (``artifact_id``, else the one
        added last). ``parts``: text, bytes, a :class:`Part`, an A2A part dict, or a list of
        them. Returns the artifact id."""
        return await self._run.artifact(
            to_parts(parts), name=name, description=description, artifact_id=artifact_id,
            append=append, last_chunk=last_chunk, metadata=metadata)

    async def input_required(self, text: str) -> str:
        """Ask the caller for input: the task waits in TASK_STATE_INPUT_REQUIRED until a
        SendMessage with its taskId arrives; returns that message's text."""
        message = await self._run.input_required(str(text))
        return message_text(message)

    async def reject(self, text: str) -> None:
        """End the task TASK_STATE_REJECTED, ``text`` being the reason."""
        await self._run.reject(str(text))

    async def reply(self, text: str) -> None:
        """Answer the SendMessage with a Message alone; no task is kept."""
        await self._run.reply(str(text))


def to_parts(value: Any) -> list[dict[str, Any]]:
    """A2A part dicts from text, bytes, a Part, a part dict, or a list of those."""
    items = value if isinstance(value, list | tuple) else [value]
    parts: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        try:
            if isinstance(item, str):
                parts.append({"text": item})
            elif isinstance(item, bytes | bytearray | memoryview):
                parts.append(Part(raw=bytes(item)).wire())  # type: ignore[arg-type]
            elif isinstance(item, Part):
                parts.append(item.wire())
            elif isinstance(item, Mapping):
                parts.append(Part.model_validate(dict(item)).wire())
            else:
                raise ValueError(f"a part is text, bytes, a Part or a dict, not "
                                 f"{type(item).__name__}")
        except ValidationError as exc:
            reason = exc.errors(include_url=False)[0]["msg"]
            raise ValueError(f"part {index}: {reason}") from exc
    if not parts:
        raise ValueError("an artifact needs at least one part")
    return parts


# --- python agents ---------------------------------------------------------------------


def python_agent(run_fn: PythonRun, environment: AgentEnvironment = AgentEnvironment(),
                 calls_factory: CallsFactory | None = None) -> AgentFn:
    """The gateway AgentFn of a python ``run``: one call per turn, at most ``max_turns``.

    When ``run`` returns while calls it made are unanswered and a turn is left, every
    answer is awaited and ``run`` is called again with ``task.replies`` holding them;
    with no turn left the unanswered calls are cancelled. The last return value is the
    result.
    """

    async def run_task(run: TaskRun) -> str | None:
        calls = calls_factory(run) if calls_factory is not None else None
        task = TaskContext(run, environment, calls)
        try:
            result = await run_fn(task)
            delivered = 0
            while (calls is not None and calls.unanswered() and not run.ended
                   and task.turn < environment.max_turns):
                made = calls.calls
                task.replies = await calls.answers(made[delivered:])
                delivered = len(made)
                task.turn += 1
                result = await run_fn(task)
            return result
        finally:
            if calls is not None:
                await calls.aclose()

    return run_task


def load_python_agent(capsule_dir: Path, entry: str) -> PythonRun:
    """Import ``module:callable`` from ``capsule_dir`` and check it is ``async def``.

    The entry module is imported from its file in the capsule (an installed package of the
    same name cannot stand in for it); the capsule directory is appended to ``sys.path``
    (after the standard library and the runtime's packages, which it must not shadow) so
    the agent's own sibling modules import.
    """
    module_name, _, attribute = entry.partition(":")
    if not _MODULE_RE.fullmatch(module_name) or not _NAME_RE.fullmatch(attribute):
        raise CapsuleError(f"agent.python {entry!r} is not module:callable; "
                           "write it as coder_agent:run")
    root = Path(capsule_dir).resolve()
    top = module_name.split(".")[0]
    module = _import_top(root, top, entry)
    if module_name != top:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise CapsuleError(f"agent.python {entry!r}: importing {module_name} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
    target = getattr(module, attribute, None)
    if target is None:
        raise CapsuleError(f"agent.python {entry!r}: {module_name} has no {attribute!r}")
    if not (inspect.iscoroutinefunction(target)
            or inspect.iscoroutinefunction(getattr(target, "__call__", None))):  # noqa: B004
        raise CapsuleError(f"agent.python {entry!r} must be an async function: "
                           f"async def {attribute}(task) -> str | None")
    run_fn: PythonRun = target
    return run_fn


def _import_top(root: Path, top: str, entry: str) -> ModuleType:
    path, package_dir = _module_file(root, top)
    if path is None:
        raise CapsuleError(f"agent.python {entry!r}: the capsule has no {top}.py "
                           f"or {top}/__init__.py")
    existing = sys.modules.get(top)
    if existing is not None:
        origin = getattr(existing, "__file__", None)
        if origin is not None and Path(origin).resolve() == path:
            return existing
        raise CapsuleError(f"agent.python {entry!r}: a module named {top!r} is already "
                           "imported from elsewhere; rename the capsule's module")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    spec = importlib.util.spec_from_file_location(
        top, path, submodule_search_locations=[str(package_dir)] if package_dir else None)
    if spec is None or spec.loader is None:
        raise CapsuleError(f"agent.python {entry!r}: {path.name} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(top, None)
        raise CapsuleError(f"agent.python {entry!r}: importing {top} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    return module


def _module_file(root: Path, top: str) -> tuple[Path | None, Path | None]:
    """The file of top-level module ``top`` inside ``root`` (never through a symlink out)."""
    choices = ((root / f"{top}.py", None), (root / top / "__init__.py", root / top))
    for candidate, package in choices:
        if candidate.is_file():
            resolved = candidate.resolve()
            if resolved.is_relative_to(root):
                return resolved, package.resolve() if package else None
    return None, None


# --- command agents --------------------------------------------------------------------


class CommandFailed(LauncherError):
    """A command agent exited non-zero (the task fails with this message)."""


def command_agent(argv: Sequence[str], capsule_dir: Path,
                  environment: AgentEnvironment = AgentEnvironment()) -> AgentFn:
    """The gateway AgentFn of ``command: [argv...]``, run in ``capsule_dir``."""
    if not argv or not all(isinstance(arg, str) and arg for arg in argv):
        raise CapsuleError("agent.command must be a non-empty list of non-empty strings, "
                           "such as [python3, run.py]")
    root = Path(capsule_dir).resolve()
    program = argv[0]
    if "/" not in program and "PATH" not in environment.env:
        # The agent's environment has no PATH of its own: find the program with the
        # runtime's (its location is no secret), so [python3, run.py] still starts.
        found = shutil.which(program)
        if found is None:
            raise CapsuleError(f"agent.command: {program!r} is not on the PATH; "
                               "install it or give its full path")
        program = found
    command = [program, *argv[1:]]
    # capabilities.env.allow, MURMUR_FORMATION_PEERS and the forward proxy's variables:
    # a shell script calls a member with `curl "$peer_url"` through $HTTP_PROXY.
    base_env = dict(environment.env)
    if environment.home is not None:
        base_env.setdefault("HOME", str(environment.home))
    if environment.tmp is not None:
        base_env.setdefault("TMPDIR", str(environment.tmp))

    async def run_command(run: TaskRun) -> str | None:
        env = dict(base_env)
        env[TASK_ID_ENV] = run.id
        process = await asyncio.create_subprocess_exec(
            *command, cwd=root, env=env, start_new_session=True,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await process.communicate(run.text.encode("utf-8"))
        except asyncio.CancelledError:
            await _terminate(process, environment.terminate_grace)
            raise
        if err:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.buffer.write(err)
                sys.stderr.buffer.flush()
        code = process.returncode
        if code != 0:
            raise CommandFailed(_failure(code, err))
        text = out.decode("utf-8", errors="replace")
        if text.endswith("\r\n"):
            return text[:-2]
        return text[:-1] if text.endswith("\n") else text

    return run_command


def _failure(code: int | None, err: bytes) -> str:
    if code is not None and code < 0:
        what = f"the command was killed by signal {-code}"
    else:
        what = f"the command exited with status {code}"
    tail = err.decode("utf-8", errors="replace").strip()[-STDERR_TAIL:]
    last = tail.splitlines()[-1] if tail else ""
    return f"{what}: {last}" if last else what


async def _terminate(process: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the command's process group, SIGKILL it ``grace`` seconds later."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


# --- the one entry point the member runtime calls ------------------------------------------


def load_agent(capsule_dir: Path, *, python: str | None = None,
               command: Sequence[str] | None = None,
               environment: AgentEnvironment = AgentEnvironment(),
               calls_factory: CallsFactory | None = None) -> AgentFn:
    """The capsule's agent as a gateway AgentFn: exactly one of ``python`` (``module:run``)
    and ``command`` (argv). A ``command`` agent gets no calls object: it calls members
    with any HTTP client through the forward proxy its environment names. A gateway
    member (``agent.a2a``) has no AgentFn: its door relays to its upstream."""
    if python is None and command is None:
        raise CapsuleError("the agent must have one of python and command (an `agent.a2a` "
                           "member is served by the relay, not loaded)")
    if python is not None and command is not None:
        raise CapsuleError("the agent must have exactly one of python and command")
    if python is not None:
        return python_agent(load_python_agent(capsule_dir, python), environment, calls_factory)
    assert command is not None
    return command_agent(command, capsule_dir, environment)
