"""A member's session while it serves: its door on the network, its tasks, its watchers.

In order: :class:`LiveTasks`, the tasks the door holds, followed on the trace (and
:func:`ask_operator`, for a ``--task`` task that asks for input); :class:`DoorListeners`,
the door's sockets (bound at staging), the uvicorn servers on them and the door's
gRPC server; :func:`serve`,
which serves the built door on ``127.0.0.1`` (and beyond loopback with ``--listen``),
starts the watchers, runs ``--task`` as a task on its own door and prints the one
readiness line (:func:`say_ready`) once the door answers; and :class:`Watchers`, the
seven things that end a serving session: ``murmur.StopSession`` or ``after_task: exit``,
the door's server stopping, a gateway member's upstream exiting, the lifeline closing,
the idle timeout, the deadline and the ``--task`` task ending.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gateway.a2a.jsonrpc import RpcError
from gateway.door.app import Door, PublicGrpc
from gateway.door.card_signing import card_signature
from gateway.protocol import TERMINAL_STATES, TaskState
from gateway.trace.bus import TraceRecord
from gateway.trace.context import Span
from launcher.diagnostics import DiagnosticError
from launcher.member.door import idle_timeout
from launcher.member.outcome import SESSION_NOT_STAGED, Cause, member_diagnostic
from launcher.member.server import DoorServer
from launcher.member.session_end import bounded, write_task_result
from launcher.member.session_start import StartFailed
from launcher.spawn.listen_flags import Listener, bind_listener, grpc_port
from launcher.spawn.process import divert_stderr_to, escape_control, launcher_gone, wait_for_eof

if TYPE_CHECKING:
    from launcher.member.session import MemberSession
    from launcher.member.upstream import Upstream

log = logging.getLogger("murmur.member")

#: How long the door may take to answer its first /healthz.
HEALTH_SECONDS = 10.0
#: How long uvicorn may take to close its connections at the end.
SERVER_STOP_SECONDS = 5.0
#: How long after the lifeline closed a peer looks for its launcher having gone.
LAUNCHER_GONE_SECONDS = 2.0
_RUNNING_STATES = frozenset({TaskState.WORKING, TaskState.INPUT_REQUIRED,
                             TaskState.AUTH_REQUIRED})


# --------------------------------------------------------------------- the tasks


class LiveTasks:
    """The tasks the door holds now, followed on the trace (a sink of the bus): each
    one's state, trust class and span."""

    def __init__(self, on_input_required: Callable[[object, str], None]) -> None:
        #: The state of each task the member holds.
        self.states: dict[str, str] = {}
        #: The trust class of each task the member holds (for the forward proxy).
        self.trusts: dict[str, str] = {}
        #: Each live task's span (its ``a2a_task_received`` record's), whose children
        #: its calls are (gateway.trace.context).
        self.spans: dict[str, Span] = {}
        #: Each live task's depth in member calls, when a member's call made it
        #: (docs/bounds.md); a task not here is depth 0.
        self.depths: dict[str, int] = {}
        self._on_input_required = on_input_required

    def track(self, record: TraceRecord) -> None:
        event = record.get("event")
        if event == "task_state":
            task_id, state = record.get("task_id"), record.get("state")
            if state == TaskState.INPUT_REQUIRED:
                self._on_input_required(task_id, str(record.get("reason") or ""))
            if isinstance(task_id, str) and isinstance(state, str):
                if state in TERMINAL_STATES:
                    self.states.pop(task_id, None)
                    self.trusts.pop(task_id, None)
                    self.spans.pop(task_id, None)
                    self.depths.pop(task_id, None)
                else:
                    self.states[task_id] = state
        elif event == "a2a_task_received":
            task_id, trust = record.get("task_id"), record.get("trust")
            if isinstance(task_id, str) and isinstance(trust, str):
                self.trusts[task_id] = trust
            depth = record.get("depth")
            if isinstance(task_id, str) and type(depth) is int and depth > 0:
                self.depths[task_id] = depth
            trace_id, span_id = record.get("trace_id"), record.get("span_id")
            if isinstance(task_id, str) and isinstance(trace_id, str) and isinstance(span_id, str):
                self.spans[task_id] = Span(trace_id, span_id)

    def running(self) -> tuple[str, ...]:
        """The tasks whose agent code runs now (queued ones are not running)."""
        return tuple(task for task, state in self.states.items() if state in _RUNNING_STATES)

    def call_depth(self, task_id: str | None) -> int:
        """The depth of a call made for ``task_id``: its depth plus one. For a request
        whose task is unknown (the forward proxy's), the deepest live task's plus one."""
        if task_id is not None:
            return self.depths.get(task_id, 0) + 1
        return max(self.depths.values(), default=0) + 1

    def live_trust(self) -> str:
        """``trusted`` only while the member holds tasks and every one is trusted: the
        forward proxy cannot tell which task a request is for."""
        trusts = self.trusts
        if trusts and all(trust == "trusted" for trust in trusts.values()):
            return "trusted"
        return "untrusted"


def ask_operator(session: MemberSession, task_id: object, question: str) -> None:
    """A ``--task`` run whose task asks for input says so on stderr, with the
    command that answers it (the task waits; nothing else would tell anyone)."""
    if task_id != session.task_id:
        return
    asked = f": {escape_control(question[:500])}" if question else ""
    with contextlib.suppress(OSError, ValueError):
        print(f"mur run: the task asks for input{asked}\n  answer it with: mur send "
              f"{session.plan.session_id} --task-id {task_id} \"<your answer>\"",
              file=sys.stderr, flush=True)


# --------------------------------------------------------------------- the listeners


class DoorListeners:
    """The door's sockets and the uvicorn servers on them: ``127.0.0.1`` at a port of its
    own, and beyond loopback with ``--listen`` (``listener``)."""

    def __init__(self, listener: Listener | None) -> None:
        self._listener = listener
        #: The door's loopback port and URL (0 and "" until it is bound).
        self._port = 0
        self.url = ""
        self._socket: socket.socket | None = None
        self.server: DoorServer | None = None
        self.server_task: asyncio.Task[None] | None = None
        #: The listener beyond loopback (``--listen``): its socket, server and task.
        self._public_socket: socket.socket | None = None
        self._public_server: DoorServer | None = None
        self._public_task: asyncio.Task[None] | None = None
        #: The gRPC binding's address while the door serves it, beyond loopback too when
        #: the door is published, and its door.
        self.grpc_url: str | None = None
        self.public_grpc_url: str | None = None
        self._grpc_door: Door | None = None

    def bind(self) -> None:
        """Both sockets, before anything is staged: the records name the door's URLs."""
        try:
            self._socket = _bind_loopback()
        except OSError as exc:
            raise StartFailed(member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem=f"no port can be bound on "
                f"127.0.0.1 ({exc.strerror or exc})",
                fix="check that the loopback interface is up; run it again")) from None
        self._port = int(self._socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self._port}"
        if self._listener is not None:
            try:
                self._public_socket = bind_listener(self._listener)
            except DiagnosticError as refused:
                raise StartFailed(refused.diagnostic) from None

    @property
    def public_port(self) -> int | None:
        sock = self._public_socket
        return int(sock.getsockname()[1]) if sock is not None else None

    @property
    def public_url(self) -> str | None:
        """The door's URL for clients beyond loopback (``--listen``), or None."""
        listener, port = self._listener, self.public_port
        return listener.url(port) if listener is not None and port is not None else None

    async def serve(self, door: Door) -> None:
        """Serve ``door`` on loopback; StartFailed unless it answers /healthz in time."""
        assert self._socket is not None
        self.server = server = DoorServer.for_app(door.app, stop_seconds=SERVER_STOP_SECONDS)
        self.server_task = task = asyncio.create_task(server.serve(sockets=[self._socket]),
                                                      name="murmur-door-server")
        try:
            async with asyncio.timeout(HEALTH_SECONDS):
                while not server.started:
                    if task.done():
                        break
                    await asyncio.sleep(0.005)
                while not task.done():
                    if await _healthz(self._port):
                        await self._serve_grpc(door)
                        return
                    await asyncio.sleep(0.02)
        except TimeoutError:
            pass
        problem = "the door did not answer /healthz in time"
        if task.done() and not task.cancelled():
            exc = task.exception()
            problem = f"the door stopped: {type(exc).__name__}: {exc}" if exc else \
                "the door stopped before it answered"
        raise StartFailed(member_diagnostic(
            SESSION_NOT_STAGED, action="served", problem=problem,
            fix="see the lines above; run it again"))

    async def _serve_grpc(self, door: Door) -> None:
        """The gRPC binding on a loopback port of its own, and beyond loopback on the
        listener's port + 1 (docs/grpc.md); a door that cannot serve it serves the HTTP
        bindings alone, and says why."""
        listener = self._listener
        public = None
        if listener is not None:
            public = PublicGrpc(listener.host, grpc_port(listener.port),
                                _dialled(listener.names()[0]),
                                listener.tls_cert.read_bytes() if listener.tls_cert else None,
                                listener.tls_key.read_bytes() if listener.tls_key else None)
        try:
            self.grpc_url = await door.serve_grpc(public)
        except (OSError, RuntimeError) as exc:
            log.warning("the door serves no gRPC binding: %s", exc)
            return
        self._grpc_door = door
        if public is not None and self.grpc_url is not None:
            self.public_grpc_url = f"{public.name}:{door.public_grpc_port}"

    async def serve_public(self, door: Door) -> None:
        """The listener beyond loopback: the same door app, TLS when asked."""
        listener, sock = self._listener, self._public_socket
        if listener is None or sock is None:
            return
        self._public_server = server = DoorServer.for_app(
            door.app, stop_seconds=SERVER_STOP_SECONDS,
            tls_cert=str(listener.tls_cert) if listener.tls_cert else None,
            tls_key=str(listener.tls_key) if listener.tls_key else None)
        self._public_task = task = asyncio.create_task(
            server.serve(sockets=[sock]), name="murmur-door-public")
        async with asyncio.timeout(HEALTH_SECONDS):
            while not server.started and not task.done():
                await asyncio.sleep(0.005)
        if task.done():
            exc = None if task.cancelled() else task.exception()
            raise StartFailed(member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem=f"the door's {listener.flag} "
                f"listener stopped: {type(exc).__name__}: {exc}",
                fix="see the lines above; run it again"))

    async def stop(self) -> None:
        """Stop every server (or close the sockets nothing served on): gRPC, then
        beyond loopback, then loopback."""
        door, self._grpc_door = self._grpc_door, None
        if door is not None:
            await bounded(door.stop_grpc(), SERVER_STOP_SECONDS)
        if self._public_server is not None and self._public_task is not None:
            self._public_server.stop()
            await bounded(asyncio.shield(self._public_task), SERVER_STOP_SECONDS)
            if not self._public_task.done():
                self._public_task.cancel()
        elif self._public_socket is not None:
            self._public_socket.close()
        if self.server is not None and self.server_task is not None:
            self.server.stop()
            await bounded(asyncio.shield(self.server_task), SERVER_STOP_SECONDS)
            if not self.server_task.done():
                self.server.force_exit = True
                self.server_task.cancel()
        elif self._socket is not None:
            self._socket.close()

    def close_sockets(self) -> None:
        """The sockets of a session that never served."""
        for sock in (self._socket, self._public_socket):
            if sock is not None:
                sock.close()


def _dialled(name: str) -> str:
    """A host as a gRPC client dials it (an IPv6 address in brackets)."""
    return f"[{name}]" if ":" in name else name


def _bind_loopback() -> socket.socket:
    """A listening-to-be socket on 127.0.0.1 at a port the kernel picks."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
    except OSError:
        sock.close()
        raise
    return sock


async def _healthz(port: int) -> bool:
    """Whether ``GET /healthz`` on the door answers 200."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode("ascii"))
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 2.0)
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# --------------------------------------------------------------------- serving


def _take_card_signature(session: MemberSession, door: Door) -> None:
    """In a formation, the launcher signs the card after its readiness probe and sends
    the signature on the channel (docs/audit.md, "Signed agent cards"): the door serves
    it once it verifies under the formation key. One that does not verify is logged and
    not served."""
    key = session.place.key
    directory = session.agent_side.directory
    own = session.options.card_key
    if key is None and own is not None:     # a standalone door signs its own card
        door.sign_card(card_signature(door.card, own.sign, own.kid), own.public_bytes)
        return
    if key is None or directory is None:
        return

    def signed(signature: dict[str, Any]) -> None:
        if not door.sign_card({str(k): str(v) for k, v in signature.items()}, key):
            log.warning("the card signature from the launcher does not verify for this "
                        "card; the card is served unsigned")

    directory.on_card_signature(signed)


async def serve(session: MemberSession, door: Door) -> None:
    """Serve the door just built, watch for the end, start ``--task``, say ready."""
    listeners = session.listeners
    door.on_task_end(functools.partial(write_task_result, session))
    if listeners.public_url is not None and listeners.public_port is not None:
        door.add_listener(listeners.public_port, listeners.public_url)
    await listeners.serve(door)
    await listeners.serve_public(door)
    _take_card_signature(session, door)
    session.watchers.start(door)
    if session.ending is not None:
        return
    if session.options.task is not None:
        try:
            session.task_id = await door.start_task(session.options.task)
        except RpcError as refused:
            raise StartFailed(member_diagnostic(
                SESSION_NOT_STAGED, action="given its task",
                problem=f"the door refused it ({refused})",
                fix="run it again")) from None
        session.watchers.watch_task(session.task_id)
    # A reader that is gone (a launcher that died) learns nothing more from stdout;
    # its lifeline, or a signal, ends the session.
    say_ready(session)


def say_ready(session: MemberSession) -> bool:
    """The one readiness line: JSON on stdout with ``--json``, else a sentence (on
    stderr for a person's ``--task`` run, whose stdout holds the answer alone)."""
    records, options, place = session.records, session.options, session.place
    assert records is not None
    if session.out is None:
        return True
    if options.json:
        line: dict[str, Any] = {
            "event": "ready", "session_id": session.plan.session_id, "pid": os.getpid(),
            "door_url": session.door_url}
        if session.listeners.grpc_url is not None:
            line["grpc_url"] = session.listeners.grpc_url
        line.update({"capsule": options.capsule, "version": options.version,
                     "records_dir": str(records.dir)})
        if session.public_url is not None:
            line["public_url"] = session.public_url
        if session.listeners.public_grpc_url is not None:
            line["public_grpc_url"] = session.listeners.public_grpc_url
        if session.task_id is not None:   # --task: the task it runs on its own door
            line["task_id"] = session.task_id
        if place.formation_id is not None:
            line["formation_id"] = place.formation_id
            if place.member is not None:  # None: started by hand (W-RUN-007)
                line["member"] = place.member
        text = json.dumps(line, separators=(",", ":"))
    else:
        member = f" as member {place.member} of {place.formation_id}" \
            if place.member else ""
        text = (f"mur run: {options.capsule} {options.version} is ready at "
                f"{session.door_url}{member} (session {session.plan.session_id}; operator "
                f"token in {records.operator_token})")
        if options.task is not None:
            # A person's --task run: stdout holds the result alone, so that
            # `answer=$(mur run ... --task ...)` is the answer. With --json (what the
            # launcher and scripts use) the readiness line stays the first stdout line.
            with contextlib.suppress(OSError, ValueError):
                print(text, file=sys.stderr, flush=True)
            return True
    return session.out.line(text)


# --------------------------------------------------------------------- watching


class Watchers:
    """The seven watchers of a serving session; each ends it with
    :meth:`~launcher.member.session.MemberSession.trigger`, and the first one wins."""

    def __init__(self, session: MemberSession) -> None:
        self.session = session
        self._tasks: list[asyncio.Task[Any]] = []
        self._deadline: asyncio.TimerHandle | None = None

    def start(self, door: Door) -> None:
        """Every watcher but the ``--task`` task's (:meth:`watch_task`)."""
        session = self.session
        self._watch(self._stop(door), "murmur-stop-watch")
        self._watch(self._server(), "murmur-server-watch")
        upstream = session.agent_side.upstream
        if upstream is not None and upstream.process is not None:
            self._watch(self._upstream(upstream), "murmur-upstream-watch")
        if session.place.lifeline is not None:
            self._watch(self._lifeline(session.place.lifeline), "murmur-lifeline")
        seconds = idle_timeout(session.manifest, session.options, session.place)
        if seconds is not None:
            self._watch(self._idle(door, seconds), "murmur-idle-watch")
        deadline = session.options.deadline
        if deadline is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, (deadline - datetime.now(deadline.tzinfo)).total_seconds())
            self._deadline = loop.call_later(delay, session.trigger, Cause.DEADLINE)

    def watch_task(self, task_id: str) -> None:
        self._watch(self._task(task_id), "murmur-task-watch")

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._deadline is not None:
            self._deadline.cancel()

    def _watch(self, watcher: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(watcher, name=name))

    async def _stop(self, door: Door) -> None:
        await door.stop_requested.wait()
        cause = Cause.STOP_SESSION if door.stop_reason == "stop_session" else Cause.AFTER_TASK
        self.session.trigger(cause)

    async def _server(self) -> None:
        task = self.session.listeners.server_task
        assert task is not None
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(task)
        if self.session.ending is None:
            self.session.trigger(Cause.FAILURE, failure=member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem="the door stopped serving",
                fix="see the lines above; run it again"))

    async def _upstream(self, upstream: Upstream) -> None:
        failure = await upstream.exited()
        if self.session.ending is None:
            self.session.trigger(Cause.FAILURE, failure=failure)

    async def _task(self, task_id: str) -> None:
        door = self.session.door
        assert door is not None
        await door.result(task_id)
        self.session.trigger(Cause.TASK_DONE)

    async def _idle(self, door: Door, seconds: int) -> None:
        loop = asyncio.get_running_loop()
        busy_at = loop.time()
        while True:
            await asyncio.sleep(min(1.0, seconds / 4))
            now = loop.time()
            if door.held or self.session.tasks.states:
                busy_at = now
            elif now - busy_at >= seconds:
                self.session.trigger(Cause.IDLE_TIMEOUT)
                return

    async def _lifeline(self, fd: int) -> None:
        session = self.session
        await wait_for_eof(fd)
        if session.place.delegated:   # its spawner lifeline: the delegating member ended
            if session.trigger(Cause.SPAWNER):
                session.watchdog.arm()
            return
        peer = not session.place.entry
        diverted = peer and self._divert_if_launcher_gone()
        if session.trigger(Cause.LIFELINE):
            session.watchdog.arm()
        if peer and not diverted:
            # The kernel closes a dead launcher's descriptors before it reparents its
            # children: look a little longer (the wind-down may cancel this first).
            loop = asyncio.get_running_loop()
            until = loop.time() + LAUNCHER_GONE_SECONDS
            while loop.time() < until and not self._divert_if_launcher_gone():
                await asyncio.sleep(0.05)

    def _divert_if_launcher_gone(self) -> bool:
        """A peer whose launcher is gone writes its diagnostics to logs/bootstrap.log."""
        session = self.session
        records = session.records
        if records is None or not launcher_gone(session.plan.launcher_pid):
            return False
        with contextlib.suppress(OSError):
            divert_stderr_to(records.bootstrap_log)
            if session.out is not None:
                session.out.follow_stderr()
        return True
