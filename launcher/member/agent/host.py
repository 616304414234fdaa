"""The agent process: where a member's agent code runs, confined, holding no credential.

In this order (docs/agent-protocol.md, docs/isolation.md):

1. :func:`forked_child` (a warm start: the member runtime forked before it read any
   credential) or ``python -m launcher.member.agent FD`` (a fresh interpreter) makes the
   process clean: every descriptor but the socketpair and stdio closed, stdout and
   stderr the pipe the runtime relays to its own stderr (the runtime's stdout is its
   launcher's; its stderr may move to the bootstrap log), the environment it inherited
   overwritten in memory and emptied, SIGINT ignored, death with its runtime, and the
   process not dumpable (no other process of the user reads its memory);
2. :class:`AgentHost` reads ``start``, sets the agent's own environment, confines the
   process (Landlock, the seccomp filter, then every capability dropped) before any
   capsule code is imported, loads the agent, and answers ``started``; a model member's
   tools get a sandbox of their own nested in it;
3. it runs each task's turns as the runtime asks, with a ``TaskContext`` whose calls
   into the runtime (:class:`RemoteRun`, :class:`RemoteCalls`) travel over the
   socketpair, and ``task.http`` an httpx client on the member's forward proxy;
4. the runtime closing its end cancels every task and ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import os
import signal
import socket
import sys
import traceback
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from launcher.member.agent.protocol import (
    ANSWER,
    CALL,
    CANCEL,
    CANCELLED,
    FORGET,
    LINE_LIMIT,
    RAISED,
    RETURNED,
    RUN,
    START,
    START_FAILED,
    STARTED,
    TURN,
    VERSION,
    ProtocolError,
    read_message,
    send,
)
from launcher.sandbox.landlock import prctl

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
#: How long the end waits for cancelled tasks (a command agent's SIGTERM grace, and more).
END_SECONDS = 7.0


# ------------------------------------------------------------------ a clean process


def forked_child(sock: socket.socket, output: int = 2) -> NoReturn:
    """Run the agent process in the child of a fork (``output``: the pipe its stdout and
    stderr become, which the runtime relays); never returns."""
    code = 1
    try:
        fd = _clean_process(sock.fileno(), output)
        code = asyncio.run(AgentHost(socket.socket(fileno=fd)).run())
    except BaseException:  # noqa: BLE001 - the child must never return into the runtime
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _clean_process(sock_fd: int, stderr_fd: int) -> int:
    """Item 1 of the module docstring; returns the socketpair's descriptor."""
    # Non-dumpable first: a fresh interpreter (a restart) is dumpable after its exec, and
    # its tools (same user, no capability) could then read its memory through /proc.
    prctl(_PR_SET_DUMPABLE, 0)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    os.dup2(stderr_fd, 1)
    if stderr_fd != 2:
        os.dup2(stderr_fd, 2)
    for fd in _open_descriptors():
        if fd > 2 and fd != sock_fd:
            with contextlib.suppress(OSError):
                os.close(fd)
    scrub_environment()
    return sock_fd


def _open_descriptors() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every descriptor a process may have
        return list(range(3, os.sysconf("SC_OPEN_MAX")))


def scrub_environment() -> None:
    """Overwrite, then forget, the environment this process was born with.

    The runtime's environment holds what its agent must not have (a declared bearer
    credential's variable, any secret of the user's shell), and a fork copies it: the
    C ``environ`` strings and Python's ``os.environ`` bytes are zeroed where they lie,
    so no scan of this process's memory finds them, then emptied. The agent's own
    environment comes in ``start``."""
    # Read through C pointers only: a Python copy of an entry (bytes) would itself hold
    # the value, freed but not cleared, somewhere on this process's heap.
    libc = ctypes.CDLL(None)
    strlen, strchr = libc.strlen, libc.strchr
    strlen.restype, strlen.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    strchr.restype, strchr.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]
    entries = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    index = 0
    while entries and entries[index]:
        address = entries[index]
        equals = strchr(address, ord("="))
        if equals:  # the value only: unsetenv still finds the name
            end = address + strlen(address)
            ctypes.memset(equals + 1, 0, end - equals - 1)
        index += 1
    for value in list(getattr(os.environ, "_data", {}).values()):
        # One-byte bytes objects are the interpreter's shared singletons: never
        # touched (and a one-character value is no secret).
        if isinstance(value, bytes) and len(value) > 1:
            _zero_bytes(value)
    os.environ.clear()


def _zero_bytes(value: bytes) -> None:
    # CPython keeps a bytes object's data at its end, before one NUL.
    offset = sys.getsizeof(value) - len(value) - 1
    ctypes.memset(id(value) + offset, 0, len(value))


# ------------------------------------------------------------------ the host


@dataclass
class _Task:
    context: Any            # TaskContext, or the RemoteRun of a command agent
    run: RemoteRun
    turn: asyncio.Task[None] | None = None


class AgentHost:
    """Steps 2 to 4 of the module docstring."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: dict[str, _Task] = {}
        self._asks: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._agent: Callable[..., Any] | None = None
        self._python = False
        self._environment: Any = None
        self._calls: RemoteCalls | None = None
        #: What ends with the process (a model member's tool servers).
        self._closers: list[Callable[[], Awaitable[None]]] = []
        #: How this process was confined (a model member's tools nest theirs in it).
        self._confine_plan: dict[str, Any] | None = None

    async def run(self) -> int:
        reader, writer = await asyncio.open_connection(sock=self._sock, limit=LINE_LIMIT)
        self._writer = writer
        try:
            first = await read_message(reader)
            if first is None:
                return 0
            if not self._start(first):
                await writer.drain()
                return 1
            await self._serve(reader)
            return 0
        except ProtocolError as exc:
            print(f"mur agent process: {exc}", file=sys.stderr)
            return 1
        finally:
            await self._end()
            writer.close()

    # --- start -------------------------------------------------------------------------

    def _start(self, message: dict[str, Any]) -> bool:
        assert self._writer is not None
        if message.get("op") != START or message.get("v") != VERSION:
            send(self._writer, {"op": START_FAILED, "error": f"the runtime speaks agent "
                                f"protocol {message.get('v')!r}, this process {VERSION}"})
            return False
        try:
            confined = self._prepare(message)
        except Exception as exc:  # noqa: BLE001 - told to the runtime, which says why
            send(self._writer, {"op": START_FAILED, "error": str(exc) or type(exc).__name__,
                                "type": type(exc).__name__})
            return False
        send(self._writer, {"op": STARTED, "v": VERSION, "confined": confined})
        return True

    def _prepare(self, message: dict[str, Any]) -> dict[str, Any]:
        os.environ.update({str(k): str(v) for k, v in message.get("process_env", {}).items()})
        workdir = message.get("workdir")
        if workdir:
            with contextlib.suppress(OSError):
                os.chdir(workdir)
        confined = _confine(message.get("confine"))
        self._confine_plan = message.get("confine")
        from launcher.member.capsule import (
            AgentEnvironment,
            command_agent,
            load_python_agent,
        )

        env = message.get("environment", {})
        deadline = env.get("deadline")
        self._environment = AgentEnvironment(
            member=env.get("member"), formation_id=env.get("formation_id"),
            deadline=datetime.fromisoformat(deadline) if deadline else None,
            workdir=_path(env.get("workdir")), home=_path(env.get("home")),
            tmp=_path(env.get("tmp")), env=dict(env.get("env", {})),
            max_turns=int(env.get("max_turns", 8)),
            terminate_grace=float(env.get("terminate_grace", 5.0)),
            instructions=str(env.get("instructions", "")))
        agent = message.get("agent", {})
        capsule_dir = Path(message["capsule_dir"])
        if "python" in agent or "model" in agent:
            self._python = True
            self._calls = RemoteCalls(self, tuple(message.get("peers", ())),
                                      message.get("proxy_url"),
                                      spawn=tuple(message.get("spawn", ())))
            self._agent = (load_python_agent(capsule_dir, agent["python"])
                           if "python" in agent
                           else self._model_driver(agent["model"], capsule_dir,
                                                   message.get("proxy_url")))
        else:
            self._agent = command_agent(agent["command"], capsule_dir, self._environment)
        return confined

    def _model_driver(self, settings: dict[str, Any], capsule_dir: Path,
                      proxy_url: str | None) -> Callable[..., Any]:
        """A model member's driver (launcher/member/model/), in place of capsule code; its
        tools run in a sandbox of their own nested in this process's, in the capsule's
        directory (as a ``command`` agent does). No key is here to hide from them: the
        runtime attaches it at egress, where the driver's requests go in absolute form."""
        from launcher.member.agent.http import AbsoluteFormTransport
        from launcher.member.model.driver import ModelDriver
        from launcher.member.model.mcp_tools import McpTools
        from launcher.member.model.settings import ModelSettings
        from launcher.member.model.tools import RUNTIME_TOOL_NAMES, CommandTools
        from launcher.sandbox.tool_sandbox import ToolSandbox

        model = ModelSettings.from_wire(settings)
        # The runtime never sends the key; a variable of that name is dropped all the same.
        tool_environ = {name: value for name, value in os.environ.items()
                        if name != model.api_key_env}
        assert self._calls is not None
        sandbox = ToolSandbox.of(self._confine_plan)
        commands = CommandTools(model.commands, cwd=str(capsule_dir), environ=tool_environ,
                                sandbox=sandbox)
        servers = McpTools(model.mcp, cwd=str(capsule_dir), environ=tool_environ,
                           member=self._environment.member or model.capsule,
                           taken=RUNTIME_TOOL_NAMES | commands.names(), sandbox=sandbox)
        driver = ModelDriver(
            model, self._environment, record=self._record, callees=self._calls.peers,
            capsules=self._calls.spawn, sources=[commands, servers],
            endpoint_pool=AbsoluteFormTransport(proxy_url) if proxy_url else None)
        self._closers.append(driver.aclose)
        return driver

    async def _record(self, task_id: str, event: str, fields: dict[str, Any]) -> None:
        await self.ask(task_id, "trace", event=event, fields=fields)

    # --- serving -----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader) -> None:
        while True:
            message = await read_message(reader)
            if message is None:
                return
            op = message["op"]
            if op == RUN:
                self._run(message["task"])
            elif op == TURN:
                self._next_turn(message)
            elif op == CANCEL:
                held = self._tasks.get(message.get("task_id", ""))
                if held is not None and held.turn is not None:
                    held.turn.cancel()
            elif op == FORGET:
                self._tasks.pop(message.get("task_id", ""), None)
            elif op == ANSWER:
                self._answered(message)

    def _run(self, task: dict[str, Any]) -> None:
        run = RemoteRun(self, task)
        if self._python:
            from launcher.member.capsule import TaskContext

            assert self._calls is not None
            calls: Any = self._calls.for_task(run.id)
            remote: Any = run
            context: Any = TaskContext(remote, self._environment, calls)
        else:
            context = run
        held = _Task(context=context, run=run)
        self._tasks[run.id] = held
        held.turn = asyncio.create_task(self._turn(run.id, context))

    def _next_turn(self, message: dict[str, Any]) -> None:
        held = self._tasks.get(message.get("task_id", ""))
        if held is None:
            return
        held.context.turn = int(message.get("turn", 1))
        held.context.replies = str(message.get("replies", ""))
        held.turn = asyncio.create_task(self._turn(held.run.id, held.context))

    async def _turn(self, task_id: str, context: Any) -> None:
        assert self._agent is not None and self._writer is not None
        try:
            result = await self._agent(context)
        except asyncio.CancelledError:
            send(self._writer, {"op": CANCELLED, "task_id": task_id})
            return
        except Exception as exc:  # noqa: BLE001 - the agent's failure fails its task
            send(self._writer, {
                "op": RAISED, "task_id": task_id, "type": type(exc).__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(exc))[-20000:]})
            return
        send(self._writer, {"op": RETURNED, "task_id": task_id,
                            "result": None if result is None else str(result),
                            "turns": getattr(context, "turns_used", None)})

    async def _end(self) -> None:
        turns = [held.turn for held in self._tasks.values()
                 if held.turn is not None and not held.turn.done()]
        for turn in turns:
            turn.cancel()
        if turns:
            await asyncio.wait(turns, timeout=END_SECONDS)
        for future in self._asks.values():
            if not future.done():
                future.cancel()
        if self._calls is not None:
            await self._calls.aclose()
        for close in self._closers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(close(), END_SECONDS)

    # --- asking the runtime -------------------------------------------------------------

    async def ask(self, task_id: str, method: str, **args: Any) -> Any:
        assert self._writer is not None
        ask_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._asks[ask_id] = future
        send(self._writer, {"op": CALL, "id": ask_id, "task_id": task_id, "method": method,
                            "args": args})
        try:
            return await future
        finally:
            self._asks.pop(ask_id, None)

    def _answered(self, message: dict[str, Any]) -> None:
        future = self._asks.get(message.get("id", -1))
        if future is None or future.done():
            return
        error = message.get("error")
        if error is None:
            future.set_result(message.get("value"))
        else:
            future.set_exception(rebuild_error(error))


def _confine(plan: dict[str, Any] | None) -> dict[str, Any]:
    """Landlock, the seccomp socket filter, then every capability dropped; what was
    applied, for ``started``."""
    if not plan:
        return {"landlock": 0, "seccomp": False, "capabilities_dropped": False}
    from launcher.sandbox.landlock import Confinement, HostSupport, confine, host_support
    from launcher.sandbox.privileges import drop_all_capabilities
    from launcher.sandbox.seccomp import install

    support = host_support()
    asked = plan.get("abi")
    if isinstance(asked, int) and 0 <= asked < support.abi:
        support = HostSupport(asked)
    applied = 0
    if support.files:
        # Its own /proc entries (its descriptors, its sockets), named by pid: /proc at
        # large would show every process's command line.
        own = (f"/proc/{os.getpid()}",)
        confine(Confinement(read=tuple(plan.get("read", ())) + own,
                            write=tuple(plan.get("write", ())),
                            connect_ports=tuple(plan.get("connect", ())),
                            bind_ports=tuple(plan.get("bind", ()))), support)
        applied = support.abi
    filtered = bool(plan.get("seccomp"))
    if filtered:
        install()
    drop_all_capabilities()
    return {"landlock": applied, "seccomp": filtered, "capabilities_dropped": True}


def _path(value: Any) -> Path | None:
    return Path(value) if value else None


_ERRORS: dict[str, type[Exception]] = {
    "ValueError": ValueError, "TypeError": TypeError, "LookupError": LookupError,
    "KeyError": KeyError, "PermissionError": PermissionError, "TimeoutError": TimeoutError,
    "RuntimeError": RuntimeError,
}


def rebuild_error(error: dict[str, Any]) -> BaseException:
    """The exception the runtime raised, as agent code would have seen it in-process."""
    kind, text = str(error.get("type", "RuntimeError")), str(error.get("message", ""))
    if kind == "CallFailed":
        from gateway.proxy.call_member import CallFailed

        return CallFailed(str(error.get("member", "")), str(error.get("state", "error")),
                          str(error.get("detail", "")))
    if kind == "DelegationRefused":
        from launcher.member.delegation.refused import DelegationRefused

        return DelegationRefused(str(error.get("capsule", "")),
                                 error.get("case", "not_started"), str(error.get("detail", "")))
    if kind == "CancelledError":
        return asyncio.CancelledError(text)
    cls = _ERRORS.get(kind)
    return cls(text) if cls is not None else RuntimeError(f"{kind}: {text}")


# ------------------------------------------------------------------ what agent code sees


class _Caller:
    def __init__(self, origin: str, trust: str) -> None:
        self.origin = origin
        self.trust = trust


class RemoteRun:
    """A running task as the agent process sees it: the TaskRun of the runtime's door,
    each action a call over the socketpair."""

    def __init__(self, host: AgentHost, task: dict[str, Any]) -> None:
        self._host = host
        self.id: str = task["id"]
        self.context_id: str = task.get("context_id", "")
        self.message: dict[str, Any] = task.get("message", {})
        self.message_id: str = task.get("message_id", "")
        self.text: str = task.get("text", "")
        self.history: list[dict[str, Any]] = task.get("history", [])
        self.caller = _Caller(task.get("origin", "public"), task.get("trust", "untrusted"))
        self.ended = False

    async def status(self, text: str) -> None:
        await self._host.ask(self.id, "status", text=text)

    async def artifact(self, parts: list[dict[str, Any]], **options: Any) -> str:
        return str(await self._host.ask(self.id, "artifact", parts=parts, **options))

    async def input_required(self, text: str) -> dict[str, Any]:
        message = await self._host.ask(self.id, "input_required", text=text)
        return message if isinstance(message, dict) else {}

    async def reject(self, text: str) -> None:
        await self._host.ask(self.id, "reject", text=text)

    async def reply(self, text: str) -> None:
        await self._host.ask(self.id, "reply", text=text)


class RemoteCall:
    """A call's handle: ``await handle`` is the callee's answer, or raises CallFailed."""

    def __init__(self, host: AgentHost, task_id: str, index: int, info: dict[str, Any]
                 ) -> None:
        self._host = host
        self._task_id = task_id
        self.index = index
        self.member: str = str(info.get("member", ""))
        self.task_id: str | None = info.get("task_id")
        self.state: str = str(info.get("state", "offering"))
        self._done = False

    def __repr__(self) -> str:
        return f"CallHandle(member={self.member!r}, state={self.state!r})"

    def done(self) -> bool:
        return self._done

    def __await__(self) -> Generator[Any, None, str]:
        return self._answer().__await__()

    async def _answer(self) -> str:
        try:
            return str(await self._host.ask(self._task_id, "await_call", call=self.index))
        finally:
            self._done = True

    async def outcome(self) -> str:
        try:
            return await self
        except Exception as failure:  # noqa: BLE001 - CallFailed, fenced as text
            return str(failure)


class RemoteCalls:
    """``task.call_member``, ``task.delegate``, ``task.answers``, ``task.peers`` and
    ``task.http`` of the agent process's tasks (the calls and children themselves are
    made by the runtime)."""

    def __init__(self, host: AgentHost, peers: tuple[str, ...], proxy_url: str | None,
                 *, spawn: tuple[str, ...] = ()) -> None:
        self._host = host
        self.peers = peers
        self.spawn = spawn
        self._proxy_url = proxy_url
        self._pool: Any = None

    def http_for(self, task_id: str) -> Any:
        """An httpx client whose every request goes through the member's forward proxy
        (the allow-list, and the members at ``http://<name>.formation.invalid``)."""
        from launcher.member.agent.http import proxy_pool, task_client

        if self._pool is None:
            self._pool = proxy_pool(self._proxy_url)
        return task_client(self._pool, task_id)

    def for_task(self, task_id: str) -> _TaskCalls:
        return _TaskCalls(self, task_id)

    async def aclose(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await self._pool.aclose()


class _TaskCalls:
    """The calls of one task: what ``TaskContext`` reads its calls seam from."""

    def __init__(self, calls: RemoteCalls, task_id: str) -> None:
        self._calls = calls
        self._task_id = task_id
        self._http: Any = None
        self.peers = calls.peers
        self.spawn = calls.spawn

    @property
    def http(self) -> Any:
        if self._http is None:
            self._http = self._calls.http_for(self._task_id)
        return self._http

    async def call_member(self, name: str, text: str) -> RemoteCall:
        host = self._calls._host
        info = await host.ask(self._task_id, "call_member", name=name, text=text)
        return RemoteCall(host, self._task_id, int(info["call"]), info)

    async def delegate(self, capsule: str, text: str, version: str | None = None
                       ) -> RemoteCall:
        host = self._calls._host
        info = await host.ask(self._task_id, "delegate", capsule=capsule, text=text,
                              version=version)
        return RemoteCall(host, self._task_id, int(info["call"]), info)

    async def answers(self, handles: Iterable[RemoteCall] | None = None) -> str:
        chosen = None if handles is None else [handle.index for handle in handles]
        return str(await self._calls._host.ask(self._task_id, "answers", calls=chosen))
