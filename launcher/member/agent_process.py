"""The runtime's side of its agent process (docs/agent-protocol.md, docs/isolation.md).

In this order:

1. :func:`take_warm_fork`: ``main`` forks the runtime before it reads any credential or
   starts its event loop; the child waits on its socketpair to be told what to run
   (:mod:`launcher.member.agent.host`). A fork costs about a millisecond where a new
   interpreter costs tens, which is what keeps a formation's start fast;
   :func:`spawn_agent` starts a fresh interpreter instead (a restart, or a session made
   without ``main``);
2. :class:`AgentProcess` sends ``start`` and waits for ``started``;
3. :meth:`AgentProcess.agent_fn` is the door's ``AgentFn``: each task is ``run`` in the
   agent process, turn by turn, and each ``call`` it makes is answered by this runtime:
   the task's ``TaskRun`` and its ``MemberCalls``, which hold the formation tokens. A
   python agent's turns are decided here, where its calls are: when a turn returns
   while calls it made have answers it has not read (``await handle`` or
   ``answers()``), the runtime waits for them and runs the next turn with them as
   ``task.replies`` (a rule that does not depend on how fast the answers came);
4. an agent process that ends while tasks run fails them with a message that says so
   (an :class:`AgentProcessEnded`), and the next task starts a new one;
5. :meth:`AgentProcess.close` ends it: its socketpair closes, then SIGKILL if it lingers.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.door.tasks import AgentFn, TaskRun
from gateway.trace.bus import TraceBus
from launcher.errors import LauncherError
from launcher.member.agent.protocol import (
    ANSWER,
    CALL,
    CANCEL,
    CANCELLED,
    FORGET,
    LINE_LIMIT,
    METHODS,
    RAISED,
    RETURNED,
    RUN,
    START,
    STARTED,
    TRACE_EVENTS,
    TURN,
    VERSION,
    ProtocolError,
    read_message,
    send,
)
from launcher.sandbox import descendants
from launcher.sandbox.agent_cgroup import AgentCgroup
from launcher.spawn.process import MAX_LINE, escape_control, read_ready

#: How long the agent process may take to confine itself and load the agent.
START_SECONDS = 60.0
#: How long a cancelled task's agent code may take to stop before its task ends anyway.
CANCEL_SECONDS = 10.0
#: How long ending the agent process may take before it is killed.
CLOSE_SECONDS = 8.0


class AgentProcessError(LauncherError):
    """The agent process could not be started or has ended."""


class AgentStartFailed(AgentProcessError):
    """The agent process could not confine itself or load the agent; the text says why."""


class AgentProcessEnded(AgentProcessError):
    """The agent process ended while a task ran (the task fails with this message)."""


class AgentRaised(LauncherError):
    """Agent code raised: the task fails with the agent's own exception, ``Type: text``.
    The member's log shows the agent's own traceback, not this one's."""

    def __init__(self, text: str, agent_type: str = "", agent_traceback: str = "") -> None:
        super().__init__(text)
        self.agent_type = agent_type
        self.agent_traceback = agent_traceback


# ------------------------------------------------------------------ 1. the process


@dataclass
class AgentChild:
    """A started agent process and the runtime's end of its socketpair."""

    pid: int
    sock: socket.socket
    #: The read end of the pipe that is the agent process's stdout and stderr.
    output: int = -1
    popen: subprocess.Popen[bytes] | None = None
    #: A pidfd of the process while :meth:`watch_exit` watches it.
    exit_fd: int = -1

    def poll(self) -> int | None:
        """Its wait status as a return code (negative: a signal), or None if it runs."""
        if self.popen is not None:
            return self.popen.poll()
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        return None if pid == 0 else os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)

    def watch_exit(self) -> None:
        """When the process exits, end the runtime's reading of the socketpair once what
        it wrote is read. Its end of the socketpair may outlive it (a process it forked
        holds a copy), so the end of file alone would never come."""
        try:
            self.exit_fd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):  # Linux before 5.3: the end of file tells
            return
        asyncio.get_running_loop().add_reader(self.exit_fd, self._exited)

    def _exited(self) -> None:
        self.unwatch()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)

    def unwatch(self) -> None:
        if self.exit_fd >= 0:
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self.exit_fd)
            os.close(self.exit_fd)
            self.exit_fd = -1


def take_warm_fork() -> AgentChild:
    """Fork now (one thread, no event loop, no credential read yet); the child becomes
    the agent process and never returns."""
    parent_end, child_end = socket.socketpair()
    output, output_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines run in the child
        from launcher.member.agent.host import forked_child

        parent_end.close()
        forked_child(child_end, output_end)
    child_end.close()
    os.close(output_end)
    descendants.own(pid)
    return AgentChild(pid, parent_end, output)


def spawn_agent() -> AgentChild:
    """A fresh interpreter as the agent process (nothing of this runtime's memory)."""
    parent_end, child_end = socket.socketpair()
    output, output_end = os.pipe()
    try:
        # -I: no current directory (nor script folder) on sys.path, no PYTHON* variable,
        # no user site; cwd "/": a module an agent planted in a folder it may write (its
        # work folder is often the runtime's current directory) is never imported by
        # the new, not yet confined, interpreter.
        popen = subprocess.Popen(
            [sys.executable, "-I", "-X", "utf8", "-m", "launcher.member.agent",
             str(child_end.fileno())], cwd="/",
            pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL, stdout=output_end,
            stderr=output_end, env={}, close_fds=True)
    except BaseException:
        parent_end.close()
        os.close(output)
        raise
    finally:
        child_end.close()
        os.close(output_end)
    descendants.own(popen.pid)
    return AgentChild(popen.pid, parent_end, output, popen)


def relay_output(fd: int, keep: Callable[[bytes], None] | None = None,
                 label: str | None = None) -> None:
    """Copy what the agent process prints to this runtime's stderr, line by line as it
    comes: the runtime's descriptor 2 is where its diagnostics go, and follows it to the
    session's bootstrap log when the launcher is gone; and to ``keep`` (the session's
    output log, the bytes as they came). Ends (and closes ``fd``) at end of file.

    What reaches stderr is text, each line as ``mur logs`` shows it (every control
    character but tab escaped, a carriage return too) and, with ``label``, behind
    ``[label] ``: the runtime's stderr is the operator's terminal when this member is a
    formation's entry or runs alone, and an agent's OSC 52 or a line of its own that
    reads ``[mur run] ...`` must not act there. (A peer's runtime writes to its launcher,
    which puts the member's name before each line.)"""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    prefix = f"[{label}] " if label else ""
    pending = [""]

    def write(lines: list[str]) -> None:
        text = "".join(f"{prefix}{escape_control(line.removesuffix(chr(13)))}\n"
                       for line in lines)
        with contextlib.suppress(OSError):
            os.write(2, text.encode())

    def readable() -> None:
        data = read_ready(fd)
        if data is None:
            return
        if not data:
            loop.remove_reader(fd)
            os.close(fd)
            rest = pending[0] + decoder.decode(b"", final=True)
            if rest:
                write([rest])
            return
        lines = (pending[0] + decoder.decode(data)).split("\n")
        pending[0] = lines.pop()
        if len(pending[0]) > MAX_LINE:      # a line without an end: cut, as the launcher does
            lines.append(pending[0])
            pending[0] = ""
        if lines:
            write(lines)
        if keep is not None:
            keep(data)

    loop.add_reader(fd, readable)


# ------------------------------------------------------------------ 2-5. the conversation


@dataclass
class _Running:
    run: TaskRun
    calls: Any
    waiter: asyncio.Future[str | None] | None = None
    handles: list[Any] = field(default_factory=list)
    #: The calls whose answers the agent code has read (``await handle``, ``answers``).
    seen: set[int] = field(default_factory=set)
    #: The turns the agent says the task has used (a model member counts its requests).
    turns_used: int = 0

    def unseen(self) -> list[Any]:
        return [handle for handle in self.calls.calls if id(handle) not in self.seen]


class AgentProcess:
    """One member's agent process: ``start`` is the protocol's first message (without its
    ``op`` and ``v``); ``calls_factory`` makes a python task's calls object."""

    def __init__(self, start: dict[str, Any], *, python: bool, max_turns: int,
                 calls_factory: Callable[[TaskRun], Any] | None, trace: TraceBus,
                 spawn: Callable[[], AgentChild] = spawn_agent,
                 cgroup: AgentCgroup | None = None,
                 on_record: Callable[[str, dict[str, Any]], None] | None = None,
                 on_output: Callable[[bytes], None] | None = None,
                 label: str | None = None,
                 traceback_paths: Callable[[str], str] | None = None) -> None:
        self._start = {"op": START, "v": VERSION, **start}
        self._python = python
        self._max_turns = max_turns
        self._calls_factory = calls_factory
        self._trace = trace
        self._spawn = spawn
        #: Told of each record the agent process asks for (the door's token counters).
        self._on_record = on_record
        #: Told of what the agent process prints (the session's output log).
        self._on_output = on_output
        #: Put before each line the agent prints, where nobody else puts its name there.
        self._label = label
        #: Names the files of an agent's traceback as the project has them
        #: (launcher/member/source_paths.py).
        self._traceback_paths = traceback_paths or (lambda text: text)
        #: The agent side's cgroup, where one could be made (launcher/sandbox/agent_cgroup.py).
        self._cgroup = cgroup
        self._child: AgentChild | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._running: dict[str, _Running] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._closing = False
        self.confined: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    async def start(self, child: AgentChild | None = None) -> dict[str, Any]:
        """Start (or adopt the warm ``child``), send ``start``; what it confined. Raises
        :class:`AgentStartFailed`."""
        async with self._lock:
            await self._begin(child)
            return self.confined

    async def _begin(self, child: AgentChild | None) -> None:
        child = child if child is not None else self._spawn()
        if self._cgroup is not None:  # it runs no agent code before ``start``
            self._cgroup.add(child.pid)
        self._child = child
        if child.output >= 0:
            relay_output(child.output, self._on_output, self._label)
        reader, writer = await asyncio.open_connection(sock=child.sock, limit=LINE_LIMIT)
        child.watch_exit()
        self._writer = writer
        send(writer, self._start)
        try:
            answer = await asyncio.wait_for(read_message(reader), START_SECONDS)
        except (TimeoutError, ProtocolError) as exc:
            await self._discard()
            raise AgentStartFailed(f"the agent process did not start ({exc or 'timeout'})"
                                   ) from None
        if answer is None or answer.get("op") != STARTED:
            error = answer.get("error") if answer else None
            await self._discard()
            raise AgentStartFailed(str(error) if error else
                                   "the agent process ended before it started")
        self.confined = dict(answer.get("confined") or {})
        self._reader_task = asyncio.create_task(self._read(reader), name="murmur-agent-read")

    async def _discard(self) -> None:
        child, self._child = self._child, None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if child is not None:
            await _reap(child, CLOSE_SECONDS)

    # --- 3. tasks ----------------------------------------------------------------------

    def agent_fn(self) -> AgentFn:
        return self._run_task

    async def _run_task(self, run: TaskRun) -> str | None:
        await self._alive()
        calls = self._calls_factory(run) if self._calls_factory is not None else None
        entry = _Running(run, calls)
        self._running[run.id] = entry
        try:
            result = await self._turn(entry, {"op": RUN, "task": _task_fields(run)})
            turn = max(1, entry.turns_used)
            while (self._python and calls is not None and entry.unseen()
                   and not run.ended and turn < self._max_turns):
                unseen = entry.unseen()
                replies = await calls.answers(unseen)
                entry.seen.update(id(handle) for handle in unseen)
                turn += 1
                result = await self._turn(entry, {"op": TURN, "task_id": run.id,
                                                  "turn": turn, "replies": replies})
                turn = max(turn, entry.turns_used)
            return result
        finally:
            self._running.pop(run.id, None)
            if self._writer is not None:
                send(self._writer, {"op": FORGET, "task_id": run.id})
            if calls is not None:
                await calls.aclose()

    async def _alive(self) -> None:
        """A task finds an agent process running: the next task after one ended starts
        a new one (a fresh interpreter)."""
        if self._reader_task is not None and not self._reader_task.done():
            return
        async with self._lock:
            if self._reader_task is None or self._reader_task.done():
                if self._closing:
                    raise AgentProcessEnded("the member is ending")
                await self._discard()
                await self._begin(None)

    async def _turn(self, entry: _Running, message: dict[str, Any]) -> str | None:
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        entry.waiter = future
        if self._writer is None:
            raise AgentProcessEnded("the agent process has ended")
        send(self._writer, message)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done() and self._writer is not None:
                send(self._writer, {"op": CANCEL, "task_id": entry.run.id})
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(future), CANCEL_SECONDS)
            raise

    # --- reading what the agent process says ---------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> None:
        problem = ""
        try:
            while True:
                message = await read_message(reader)
                if message is None:
                    break
                self._dispatch(message)
        except ProtocolError as exc:
            problem = str(exc)
        finally:
            await self._ended(problem)

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == CALL:
            handler = asyncio.create_task(self._answer(message))
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
            return
        entry = self._running.get(str(message.get("task_id")))
        future = entry.waiter if entry is not None else None
        if future is None or future.done():
            return
        if op == RETURNED:
            result, turns = message.get("result"), message.get("turns")
            if isinstance(turns, int) and entry is not None:
                entry.turns_used = turns
            future.set_result(None if result is None else str(result))
        elif op == RAISED:
            kind = str(message.get("type") or "Exception")
            said = str(message.get("message") or "")
            # The type, then the text, as Python's own last traceback line: a KeyError's
            # text alone ('missing') would not say what went wrong.
            frames = str(message.get("traceback", "")).rstrip()
            future.set_exception(AgentRaised(f"{kind}: {said}" if said else kind, kind,
                                             self._traceback_paths(frames) if frames else ""))
        elif op == CANCELLED:
            future.cancel()

    async def _ended(self, problem: str) -> None:
        """Step 4: every running task fails, saying the agent process ended and how."""
        child = self._child
        status = await _reap(child, 2.0) if child is not None else None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._closing:
            return
        how = _how(status) + (f"; {problem}" if problem else "")
        failed = [entry for entry in self._running.values()
                  if entry.waiter is not None and not entry.waiter.done()]
        # What it started and left behind (a double-forked daemon) ends with it.
        ended: frozenset[int] = frozenset()
        if self._cgroup is not None:
            ended = await asyncio.to_thread(self._cgroup.kill)
        ended |= await asyncio.to_thread(descendants.end_orphans)
        self._trace.emit("agent_process_ended", pid=child.pid if child else None,
                         status=how, tasks_failed=len(failed), descendants_ended=len(ended))
        for entry in failed:
            assert entry.waiter is not None
            entry.waiter.set_exception(AgentProcessEnded(
                f"the agent process ended while the task ran ({how}); a new one is "
                "started for the next task"))

    # --- answering its calls ----------------------------------------------------------

    async def _answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"op": ANSWER, "id": message.get("id")}
        try:
            reply["value"] = await self._serve_call(message)
        except asyncio.CancelledError:
            return
        except Exception as exc:  # noqa: BLE001 - the agent code sees it, as in-process
            reply["error"] = _error_wire(exc)
        if self._writer is not None:
            send(self._writer, reply)

    async def _serve_call(self, message: dict[str, Any]) -> Any:
        method, args = message.get("method"), message.get("args")
        entry = self._running.get(str(message.get("task_id")))
        if entry is None:
            raise RuntimeError("the task has ended")
        if method not in METHODS or not isinstance(args, dict):
            raise ValueError(f"no such call: {method!r}")
        run = entry.run
        if method in ("status", "reject", "reply"):
            await getattr(run, method)(str(args.get("text", "")))
            return None
        if method == "input_required":
            return await run.input_required(str(args.get("text", "")))
        if method == "artifact":
            return await _artifact(run, args)
        if method == "trace":
            return self._agent_record(run, args)
        return await self._calls_method(entry, method, args)

    def _agent_record(self, run: TaskRun, args: dict[str, Any]) -> None:
        """A model member's ``model_call``, ``tool_call`` or ``limit_reached`` (its
        ``limits.tokens``) record, written as this
        runtime writes its own (bounded, redacted by the bus); the token counters."""
        event, fields = args.get("event"), args.get("fields")
        if event not in TRACE_EVENTS or not isinstance(fields, dict):
            raise ValueError(f"no such trace record: {event!r}")
        fields = {str(key): value for key, value in fields.items()
                  if key not in ("event", "ts", "task_id", "session_id")}
        self._trace.emit(str(event), task_id=run.id, **fields)
        if self._on_record is not None:
            self._on_record(str(event), fields)

    async def _calls_method(self, entry: _Running, method: str, args: dict[str, Any]
                            ) -> Any:
        calls = entry.calls
        spawn = getattr(calls, "spawn", ())
        if method == "delegate":
            if calls is None or not spawn:
                raise RuntimeError("this member may delegate to no capsule "
                                   "(capabilities.spawn.allow is empty)")
            version = args.get("version")
            child = await calls.delegate(str(args.get("capsule", "")),
                                         str(args.get("text", "")),
                                         None if version is None else str(version))
            entry.handles.append(child)
            return {"call": len(entry.handles) - 1, "member": child.member,
                    "task_id": child.task_id, "state": child.state}
        if calls is None or not (calls.peers or spawn):
            raise RuntimeError("this member may call no other member")
        if method == "call_member":
            handle = await calls.call_member(str(args.get("name", "")),
                                             str(args.get("text", "")))
            entry.handles.append(handle)
            return {"call": len(entry.handles) - 1, "member": handle.member,
                    "task_id": handle.task_id, "state": handle.state}
        if method == "await_call":
            handle = _handle(entry, args.get("call"))
            entry.seen.add(id(handle))
            return await handle
        chosen = args.get("calls")
        handles = list(calls.calls) if chosen is None else [
            _handle(entry, index) for index in chosen]
        entry.seen.update(id(handle) for handle in handles)
        return await calls.answers(handles)

    async def close(self) -> None:
        """Step 5."""
        self._closing = True
        for handler in list(self._handlers):
            handler.cancel()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader_task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._reader_task), CLOSE_SECONDS)
        child, self._child = self._child, None
        if child is not None:
            await _reap(child, 0.5)


def _handle(entry: _Running, index: Any) -> Any:
    if not isinstance(index, int) or not 0 <= index < len(entry.handles):
        raise LookupError(f"no call {index!r} of this task")
    return entry.handles[index]


async def _artifact(run: TaskRun, args: dict[str, Any]) -> str:
    from launcher.member.capsule import to_parts

    def text(key: str) -> str | None:
        value = args.get(key)
        return value if isinstance(value, str) else None

    metadata = args.get("metadata")
    return await run.artifact(
        to_parts(args.get("parts")), name=text("name"), description=text("description"),
        artifact_id=text("artifact_id"), append=bool(args.get("append")),
        last_chunk=bool(args.get("last_chunk")),
        metadata=metadata if isinstance(metadata, dict) else None)


def _task_fields(run: TaskRun) -> dict[str, Any]:
    fields: dict[str, Any] = {"id": run.id, "context_id": run.context_id, "message": run.message,
              "message_id": run.message_id, "text": run.text, "origin": run.caller.origin,
              "trust": run.caller.trust}
    history = run.history
    if history:  # a new context (most tasks) sends nothing more
        fields["history"] = history
    return fields


#: The fields of the runtime's own errors that the agent process rebuilds them from.
_ERROR_FIELDS: dict[str, tuple[str, ...]] = {
    "CallFailed": ("member", "state", "detail"),
    "DelegationRefused": ("capsule", "case", "detail"),
}


def _error_wire(exc: BaseException) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    for attribute in _ERROR_FIELDS.get(type(exc).__name__, ()):
        wire[attribute] = str(getattr(exc, attribute, ""))
    return wire


def _how(status: int | None) -> str:
    if status is None:
        return "it did not exit"
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-status).name}"
        return f"killed by signal {-status}"
    return f"exit status {status}"


async def _reap(child: AgentChild, seconds: float) -> int | None:
    """Wait ``seconds`` for the child to exit, then kill it; its status."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while True:
        status = child.poll()
        if status is not None:
            break
        if loop.time() >= until:
            child.kill()
            for _ in range(100):
                await asyncio.sleep(0.01)
                status = child.poll()
                if status is not None:
                    break
            break
        await asyncio.sleep(0.005)
    child.unwatch()
    with contextlib.suppress(OSError):
        child.sock.close()
    if status is not None:
        descendants.release(child.pid)
    return status
