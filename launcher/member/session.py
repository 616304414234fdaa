"""One member's session, from staging to ``session_end`` (docs/member-runtime.md).

:class:`MemberSession` stages the records directory (``operator.token`` at 0600, the
running record, ``session_start``), builds the door and the agent, serves the door with
uvicorn on ``127.0.0.1`` at a port of its own, prints the one readiness line once the
door answers, runs ``--task`` as a task on its own door, and ends on the first of: a
signal, ``murmur.StopSession``, ``after_task: exit``, the idle timeout, the lifeline
closing, the deadline, or the ``--task`` task ending. The ending itself follows
:mod:`launcher.member.outcome`; ``session_end`` is always written and the running record
always removed.

A file the session cannot write (a full disk, most often) is ``E-RUN-048`` naming it:
before the door is ready it ends the session; after, it is printed once per file until a
write of that file succeeds again, and a ``result.txt`` that cannot be written is removed
rather than left holding an earlier task's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import sys
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.a2a.jsonrpc import RpcError
from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.streams import StreamLimits
from gateway.metrics import DoorMetrics
from gateway.protocol import TERMINAL_STATES, TaskState
from gateway.trace.bus import TraceBus, TraceRecord
from gateway.trace.context import Span
from launcher.admission.store import InstalledArtifact, unpack
from launcher.diagnostics import Diagnostic, DiagnosticError, emit
from launcher.errors import LauncherError
from launcher.home.files import DISK_FULL_ERRNOS, write_atomic
from launcher.home.records import SessionRecords, stage_session, write_operator_token
from launcher.home.running_records import RunningRecord, now_iso, remove_running, write_running
from launcher.home.trace import TraceWriter, timestamp
from launcher.member.agent_process import AgentChild, AgentProcess, AgentStartFailed
from launcher.member.door import (
    CallsSeam,
    agent_environment,
    auth_policy,
    card_info,
    gate_config,
    idle_timeout,
    process_environment,
    task_env,
)
from launcher.member.member_log import close_member_log, open_member_log
from launcher.member.options import MemberOptions
from launcher.member.outcome import (
    CANCEL_REASONS,
    CAPSULE_NOT_RUNNABLE,
    SESSION_NOT_STAGED,
    Cause,
    Ending,
    SessionOutcome,
    decide,
    file_not_written,
    member_diagnostic,
    result_text,
)
from launcher.member.place import FormationPlace, close_place
from launcher.member.proxy_slot import ProxySlot
from launcher.member.server import DoorServer
from launcher.member.shutdown import ExitFn, ProtocolOut, SignalGuard, Watchdog, hard_exit
from launcher.member.span_export import SpanExport, start_span_export
from launcher.sandbox import descendants
from launcher.sandbox.agent_cgroup import AgentCgroup
from launcher.sandbox.isolation import OFF
from launcher.sandbox.landlock import host_support
from launcher.spawn.channel import DoorDirectory
from launcher.spawn.listen_flags import bind_listener
from launcher.spawn.process import (
    divert_stderr_to,
    escape_control,
    launcher_gone,
    process_start_time,
    wait_for_eof,
)

if TYPE_CHECKING:  # imported when a member needs them: httpx and aiohttp cost a start CPU
    from gateway.proxy.forward import ForwardProxy
    from launcher.member.confinement import AgentPlan
    from launcher.member.upstream import Upstream

#: How long the wind-down waits for agent code to stop after it was cancelled.
DRAIN_SECONDS = 15.0
#: How long ending a gateway member's upstream may take (SIGTERM, SIGKILL 5 s later).
UPSTREAM_STOP_SECONDS = 11.0
#: How long the door may take to answer its first /healthz.
HEALTH_SECONDS = 10.0
#: How long uvicorn may take to close its connections at the end.
SERVER_STOP_SECONDS = 5.0
#: The longest the session's end waits for its last spans to reach the OTLP collector.
SPAN_FLUSH_SECONDS = 4.0
#: How long after the lifeline closed a peer looks for its launcher having gone.
LAUNCHER_GONE_SECONDS = 2.0
_RUNNING_STATES = frozenset({TaskState.WORKING, TaskState.INPUT_REQUIRED,
                             TaskState.AUTH_REQUIRED})


@dataclass
class SessionPlan:
    """What ``mur run --capsule`` decided before the session starts."""

    options: MemberOptions
    artifact: InstalledArtifact
    place: FormationPlace
    session_id: str
    workdir: Path
    environ: Mapping[str, str]
    launcher_pid: int
    lifeline_grace: float = 20.0
    install_signals: bool = True
    #: How the process is ended at once (tests record the status instead).
    exit_fn: ExitFn = hard_exit
    #: Tests: where diagnostics go (stderr by default).
    diagnostics: Any = None
    #: The agent process ``main`` forked before reading any credential (None: a fresh
    #: interpreter is started instead).
    agent_child: AgentChild | None = None


class StartFailed(LauncherError):
    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


@dataclass
class _Watchers:
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    deadline: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.deadline is not None:
            self.deadline.cancel()


class MemberSession:
    """One session of a member; :meth:`run` returns its :class:`SessionOutcome`."""

    def __init__(self, plan: SessionPlan, out: ProtocolOut | None) -> None:
        self.plan = plan
        self.options = plan.options
        self.place = plan.place
        self.manifest = plan.artifact.manifest
        self.out = out
        self.operator = OperatorToken.generate()
        self.bus = TraceBus()
        self.records: SessionRecords | None = None
        self.writer: TraceWriter | None = None
        self._log: logging.Handler | None = None
        self.door: Door | None = None
        self.door_url = ""
        self._port = 0
        self.task_id: str | None = None
        self.ending: Ending | None = None
        self._socket: socket.socket | None = None
        self._server: DoorServer | None = None
        self._server_task: asyncio.Task[None] | None = None
        #: The listener beyond loopback (``--listen``): its socket, server and task.
        self._public_socket: socket.socket | None = None
        self._public_server: DoorServer | None = None
        self._public_task: asyncio.Task[None] | None = None
        self._directory: DoorDirectory | None = None
        self._seam: CallsSeam | None = None
        self._proxy: ProxySlot | None = None
        self._agent: AgentProcess | None = None
        self._upstream: Upstream | None = None
        #: The agent side's cgroup, where one can be made (launcher/sandbox/agent_cgroup.py).
        self._cgroup: AgentCgroup | None = None
        self._live: dict[str, str] = {}
        #: The trust class of each task the member holds (for the forward proxy).
        self._trusts: dict[str, str] = {}
        #: Each live task's span (its ``a2a_task_received`` record's), whose children
        #: its calls are (gateway.trace.context).
        self._spans: dict[str, Span] = {}
        self._span_export: SpanExport | None = None
        #: The door's metrics (GET /metrics), which the member's proxies count into too.
        self.metrics = DoorMetrics()
        #: Files whose last write failed and was reported (E-RUN-048 is printed once).
        self._unwritten: set[str] = set()
        self._watchers = _Watchers()
        self._ended = asyncio.Event()
        self._watchdog = Watchdog(plan.lifeline_grace, exit_fn=plan.exit_fn)

    # --------------------------------------------------------------------- the run

    async def run(self) -> SessionOutcome:
        loop = asyncio.get_running_loop()
        guard = SignalGuard(loop, self._on_signal, with_interrupts=self.place.lifeline is None,
                            exit_fn=self.plan.exit_fn, on_child=descendants.reap_orphans)
        if self.plan.install_signals:
            guard.install()
        try:
            try:
                self._stage()
            except StartFailed as failed:
                self._close_early()
                outcome = SessionOutcome(1, "failed", failed.diagnostic)
                self._report(failed.diagnostic)
                return outcome
            try:
                await self._start()
            except StartFailed as failed:
                self.trigger(Cause.FAILURE, failure=failed.diagnostic)
            except DiagnosticError as refusal:
                self.trigger(Cause.FAILURE, failure=refusal.diagnostic)
            except OSError as exc:
                self.trigger(Cause.FAILURE, failure=self._start_failure(exc))
            except Exception as exc:  # noqa: BLE001 - a bug ends the session, not its records
                self.trigger(Cause.FAILURE, failure=member_diagnostic(
                    SESSION_NOT_STAGED, action="started",
                    problem=f"{type(exc).__name__}: {exc}",
                    fix="this is a fault in mur; report it with the session's trace.jsonl"))
            await self._ended.wait()
            return await self._finish()
        finally:
            guard.restore()

    def _start_failure(self, exc: OSError) -> Diagnostic:
        """An OSError while starting: a file that cannot be written, else a fault."""
        if exc.filename is not None or exc.errno in DISK_FULL_ERRNOS:
            assert self.records is not None
            return file_not_written(exc.filename or self.records.dir, exc,
                                    what="a file of the session")
        return member_diagnostic(
            SESSION_NOT_STAGED, action="started", problem=f"{type(exc).__name__}: {exc}",
            fix="this is a fault in mur; report it with the session's trace.jsonl")

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self.trigger(Cause.SIGNAL, detail=name)

    # --------------------------------------------------------------------- staging

    def _stage(self) -> None:
        plan, options = self.plan, self.options
        try:
            self._socket = _bind_loopback()
        except OSError as exc:
            raise StartFailed(member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem=f"no port can be bound on "
                f"127.0.0.1 ({exc.strerror or exc})",
                fix="check that the loopback interface is up; run it again")) from None
        self._port = int(self._socket.getsockname()[1])
        self.door_url = f"http://127.0.0.1:{self._port}"
        if options.listener is not None:
            try:
                self._public_socket = bind_listener(options.listener)
            except DiagnosticError as refused:
                raise StartFailed(refused.diagnostic) from None
        try:
            records = stage_session(plan.workdir, plan.session_id,
                                    resume=options.resume is not None)
            self.records = records
            write_operator_token(records.operator_token, self.operator.value,
                                 replace=options.resume is not None)
            self.writer = TraceWriter(records.trace)
            self._log = open_member_log(records.member_log)
        except OSError as exc:
            raise StartFailed(file_not_written(
                exc.filename or "the records directory", exc,
                what="the session's records")) from None
        self.bus.add_sink(self._write_record)
        self.bus.add_sink(self._track_task)
        self._span_export = start_span_export(
            member=self.place.member or self.options.capsule, session_id=self.plan.session_id,
            formation_id=self.place.formation_id)
        if self._span_export is not None:
            self.bus.add_sink(self._span_export)
        try:
            write_running(self._running_record(records))
        except OSError as exc:
            raise StartFailed(file_not_written(
                exc.filename or "the running record", exc,
                what="the running record")) from None
        self.bus.emit("session_start", **self._start_fields(records))

    def _running_record(self, records: SessionRecords) -> RunningRecord:
        pid = os.getpid()
        return RunningRecord(
            id=self.plan.session_id, pid=pid, start=process_start_time(pid), kind="session",
            formation_id=self.place.formation_id, member=self.place.member,
            door_url=self.door_url, records_dir=str(records.dir), public_url=self.public_url,
            project_dir=os.path.realpath(self.options.project),
            capsule=self.options.capsule, version=self.options.version, started=now_iso())

    def _start_fields(self, records: SessionRecords) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "session_id": self.plan.session_id, "capsule": self.options.capsule,
            "version": self.options.version, "sha256": self.plan.artifact.sha256,
            "pid": os.getpid(), "workdir": str(records.workdir),
            "records_dir": str(records.dir), "door_url": self.door_url,
        }
        if self.options.resume is not None:
            fields["resumed"] = True
        if self.options.deadline is not None:
            fields["deadline"] = timestamp(self.options.deadline)
        if self.place.formation_id is not None:
            fields["formation_id"] = self.place.formation_id
        if self.place.member is not None:
            fields["formation_member"] = self.place.member
            fields["formation_callees"] = list(self.place.callees)
        return fields

    def _write_record(self, record: TraceRecord) -> None:
        writer = self.writer
        if writer is not None and not writer.closed:
            fields = {key: value for key, value in record.items() if key not in ("ts", "event")}
            try:
                writer.write(record["event"], **fields)
            except OSError as exc:  # a full disk must not fail the task that was traced
                self._write_failed(writer.path, file_not_written(
                    writer.path, exc, what="the session's trace"))
            else:
                if self._unwritten:
                    self._unwritten.discard(str(writer.path))

    def _track_task(self, record: TraceRecord) -> None:
        event = record.get("event")
        if event == "task_state":
            task_id, state = record.get("task_id"), record.get("state")
            if state == TaskState.INPUT_REQUIRED and task_id == self.task_id:
                self._ask_operator(str(task_id), str(record.get("reason") or ""))
            if isinstance(task_id, str) and isinstance(state, str):
                if state in TERMINAL_STATES:
                    self._live.pop(task_id, None)
                    self._trusts.pop(task_id, None)
                    self._spans.pop(task_id, None)
                else:
                    self._live[task_id] = state
        elif event == "a2a_task_received":
            task_id, trust = record.get("task_id"), record.get("trust")
            if isinstance(task_id, str) and isinstance(trust, str):
                self._trusts[task_id] = trust
            trace_id, span_id = record.get("trace_id"), record.get("span_id")
            if isinstance(task_id, str) and isinstance(trace_id, str) and isinstance(span_id, str):
                self._spans[task_id] = Span(trace_id, span_id)

    def _ask_operator(self, task_id: str, question: str) -> None:
        """A ``--task`` run whose task asks for input says so on stderr, with the
        command that answers it (the task waits; nothing else would tell anyone)."""
        asked = f": {escape_control(question[:500])}" if question else ""
        with contextlib.suppress(OSError, ValueError):
            print(f"mur run: the task asks for input{asked}\n  answer it with: mur send "
                  f"{self.plan.session_id} --task-id {task_id} \"<your answer>\"",
                  file=sys.stderr, flush=True)

    def running_tasks(self) -> tuple[str, ...]:
        """The tasks whose agent code runs now (queued ones are not running)."""
        return tuple(task for task, state in self._live.items() if state in _RUNNING_STATES)

    # --------------------------------------------------------------------- starting

    async def _start(self) -> None:
        records = self.records
        assert records is not None
        self._start_directory()
        self._unpack(records)
        self._seam = self._calls_seam()
        if self.manifest.agent.a2a is not None:
            door = await self._start_gateway(records)
            if door is None:  # the session ended while the upstream came up
                return
            self.door = door
        else:
            agent = await self._start_agent(records)
            if self.ending is not None:
                return
            self.door = self._build_door(agent, records)
        self.door.on_task_end(self._task_ended)
        if self.public_url is not None and self._public_port is not None:
            self.door.add_listener(self._public_port, self.public_url)
        await self._serve()
        await self._serve_public()
        self._watch()
        if self.ending is not None:
            return
        if self.options.task is not None:
            try:
                self.task_id = await self.door.start_task(self.options.task)
            except RpcError as refused:
                raise StartFailed(member_diagnostic(
                    SESSION_NOT_STAGED, action="given its task",
                    problem=f"the door refused it ({refused})",
                    fix="run it again")) from None
            self._watchers.tasks.append(asyncio.create_task(
                self._watch_task(self.task_id), name="murmur-task-watch"))
        # A reader that is gone (a launcher that died) learns nothing more from stdout;
        # its lifeline, or a signal, ends the session.
        self._say_ready()

    def _start_directory(self) -> None:
        credentials = self.place.credentials
        if credentials is not None:
            self._directory = DoorDirectory.for_channel(credentials)
            self._directory.start()
        else:
            self._directory = DoorDirectory()

    def _unpack(self, records: SessionRecords) -> None:
        capsule_dir = records.dir / "capsule"
        if self.options.resume is not None and capsule_dir.exists():
            shutil.rmtree(capsule_dir, ignore_errors=True)
        try:
            unpack(self.plan.artifact, capsule_dir)
        except OSError as exc:
            shutil.rmtree(capsule_dir, ignore_errors=True)
            raise StartFailed(file_not_written(
                exc.filename or capsule_dir, exc, what="the capsule",
                note="its partly unpacked folder was removed")) from None

    def _calls_seam(self) -> CallsSeam:
        assert self._directory is not None
        return CallsSeam(manifest=self.manifest, place=self.place, directory=self._directory,
                         trace=self.bus, spans=self._spans.get, metrics=self.metrics,
                         deadline=self.options.deadline,
                         capsule=self.options.capsule)

    def _reserve_proxy(self) -> ProxySlot:
        """The forward proxy every agent process reaches the formation and the network
        through (docs/proxy.md, "The forward proxy"): its port now, the proxy itself on
        its first connection."""
        slot = ProxySlot()
        self._proxy = slot
        slot.serve_when_reached(self._build_forward_proxy)
        return slot

    def _build_forward_proxy(self, secret: str) -> ForwardProxy:
        from gateway.proxy.forward import ForwardProxy

        assert self._seam is not None
        return ForwardProxy(self._seam.transport, trust=self._live_trust, secret=secret,
                            task_trust=self._trusts.get)

    def _live_trust(self) -> str:
        """``trusted`` only while the member holds tasks and every one is trusted: the
        forward proxy cannot tell which task a request is for."""
        trusts = self._trusts
        if trusts and all(trust == "trusted" for trust in trusts.values()):
            return "trusted"
        return "untrusted"

    def _confinement(self, records: SessionRecords, proxy_port: int,
                     bind_ports: tuple[int, ...] = ()) -> AgentPlan | None:
        """What agent code may touch (docs/isolation.md); None with ``--isolation off``.
        On a host without Landlock or seccomp the agent side applies what there is
        (``auto`` warned of the rest; ``required`` refused)."""
        if self.options.isolation == OFF:
            return None
        from launcher.home.paths import murmur_home
        from launcher.member.confinement import agent_plan
        from launcher.sandbox.seccomp import seccomp_support

        return agent_plan(home=murmur_home(), capsule_dir=records.dir / "capsule",
                          session_dirs=(records.home, records.tmp, records.out),
                          workdir=records.workdir, proxy_port=proxy_port,
                          bind_ports=bind_ports, seccomp=seccomp_support().available)

    def _agent_cgroup(self) -> AgentCgroup | None:
        """The agent side's cgroup, made once, where this runtime owns its processes and
        may make one (docs/isolation.md, "Processes")."""
        if self._cgroup is None and descendants.owning():
            self._cgroup = AgentCgroup.make(self.plan.session_id)
        return self._cgroup

    async def _start_agent(self, records: SessionRecords) -> Any:
        """Start the agent process (the warm fork ``main`` took, else a new one), tell
        it what to run and how it is confined; the door's AgentFn."""
        manifest = self.manifest
        slot = self._reserve_proxy()
        env = task_env(manifest, self.plan.environ, self.place.callees)
        python = manifest.agent.python is not None
        environment = agent_environment(
            manifest, place=self.place, env=env if python else slot.environment(env),
            deadline=self.options.deadline, workdir=records.workdir, home=records.home,
            tmp=records.tmp)
        confinement = self._confinement(records, slot.port)
        start = {
            "agent": {"python": manifest.agent.python} if python
            else {"command": list(manifest.agent.command or ())},
            "capsule_dir": str(records.dir / "capsule"),
            "environment": environment.wire(),
            "process_env": slot.environment(process_environment(
                self.plan.environ, env, home=records.home, tmp=records.tmp)),
            "proxy_url": slot.url, "peers": list(self.place.callees),
            "workdir": str(records.workdir),
            # The ABI this runtime found (a test may have lowered it): the agent process
            # confines itself with no more than that.
            "confine": {**confinement.wire(), "abi": host_support().abi}
            if confinement is not None else None,
        }
        assert self._seam is not None
        process = AgentProcess(
            start, python=python, max_turns=manifest.inference.max_turns, trace=self.bus,
            calls_factory=self._seam.calls_for if python and self.place.callees else None,
            cgroup=self._agent_cgroup())
        self._agent = process
        child, self.plan.agent_child = self.plan.agent_child, None
        try:
            confined = await process.start(child)
        except AgentStartFailed as exc:
            raise StartFailed(member_diagnostic(
                CAPSULE_NOT_RUNNABLE, "agent", capsule=self.options.capsule,
                version=self.options.version, problem=str(exc))) from None
        self.bus.emit("agent_process_started", pid=process.pid,
                      isolation=self.options.isolation, **confined,
                      withheld=list(confinement.withheld) if confinement else [],
                      cgroup=str(self._cgroup.path) if self._cgroup else None)
        return process.agent_fn()

    async def _start_gateway(self, records: SessionRecords) -> Door | None:
        """Start (or reach) the upstream, wait for its card, and build the relay door;
        None when the session is ended meanwhile (a signal, the lifeline)."""
        from gateway.relay.tasks import build_gateway_door
        from launcher.member.upstream import (
            READY_SECONDS,
            Upstream,
            UpstreamSpec,
            upstream_environment,
        )

        manifest = self.manifest
        agent = manifest.agent.a2a
        assert agent is not None
        allowed = task_env(manifest, self.plan.environ, ())
        spec = UpstreamSpec(agent=agent, capsule_dir=records.dir / "capsule",
                            member=self.place.member or self.options.capsule,
                            capsule=self.options.capsule, version=self.options.version)
        upstream = Upstream.prepare(spec, allowed)
        self._upstream = upstream
        self._release_warm_child()
        slot = self._reserve_proxy()
        env = slot.environment(upstream_environment(
            allowed, port=upstream.port, callees=self.place.callees, home=records.home,
            tmp=records.tmp))
        confinement = None
        if upstream.port is not None:
            confinement = self._confinement(records, slot.port, (upstream.port,))
        await upstream.start(env, confinement=confinement, cgroup=self._agent_cgroup())
        waiting = asyncio.create_task(upstream.wait_for_card(self._ready_seconds(READY_SECONDS)),
                                      name="murmur-upstream-card")
        ended = asyncio.create_task(self._ended.wait())
        try:
            await asyncio.wait({waiting, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiting
            return None
        client = waiting.result()  # its DiagnosticError ends the session
        assert upstream.card is not None
        return build_gateway_door(client, upstream.card, self._door_settings(records),
                                  policy=self._policy(records), trace=self.bus,
                                  metrics=self.metrics)

    def _ready_seconds(self, budget: float) -> float:
        """``budget``, or less when the deadline comes first."""
        deadline = self.options.deadline
        if deadline is None:
            return budget
        left = (deadline - datetime.now(deadline.tzinfo)).total_seconds()
        return max(0.0, min(budget, left))

    def _policy(self, records: SessionRecords) -> AuthPolicy:
        policy = auth_policy(self.manifest, operator=self.operator, place=self.place,
                             capsule_dir=records.dir / "capsule", environ=self.plan.environ,
                             capsule=self.options.capsule)
        listener, public = self.options.listener, self._public_port
        if listener is None or public is None:
            return policy
        return dataclasses.replace(policy, public_port=public,
                                   public_hosts=listener.names())

    @property
    def _public_port(self) -> int | None:
        sock = self._public_socket
        return int(sock.getsockname()[1]) if sock is not None else None

    @property
    def public_url(self) -> str | None:
        """The door's URL for clients beyond loopback (``--listen``), or None."""
        listener, port = self.options.listener, self._public_port
        return listener.url(port) if listener is not None and port is not None else None

    def _door_settings(self, records: SessionRecords) -> DoorSettings:
        manifest = self.manifest
        return DoorSettings(
            card=card_info(manifest, session_id=self.plan.session_id, place=self.place,
                           door_url=self.door_url),
            gate=gate_config(manifest, self.options), out_dir=records.out,
            streams=stream_limits())

    def _build_door(self, agent: Any, records: SessionRecords) -> Door:
        return build_door(agent, self._door_settings(records), policy=self._policy(records),
                          trace=self.bus, metrics=self.metrics)

    async def _serve(self) -> None:
        assert self.door is not None and self._socket is not None
        self._server = DoorServer.for_app(self.door.app,
                                          stop_seconds=SERVER_STOP_SECONDS)
        sock = self._socket
        self._server_task = asyncio.create_task(self._server.serve(sockets=[sock]),
                                                name="murmur-door-server")
        try:
            async with asyncio.timeout(HEALTH_SECONDS):
                while not self._server.started:
                    if self._server_task.done():
                        break
                    await asyncio.sleep(0.005)
                while not self._server_task.done():
                    if await _healthz(self._port):
                        return
                    await asyncio.sleep(0.02)
        except TimeoutError:
            pass
        problem = "the door did not answer /healthz in time"
        if self._server_task.done() and not self._server_task.cancelled():
            exc = self._server_task.exception()
            problem = f"the door stopped: {type(exc).__name__}: {exc}" if exc else \
                "the door stopped before it answered"
        raise StartFailed(member_diagnostic(
            SESSION_NOT_STAGED, action="served", problem=problem,
            fix="see the lines above; run it again"))

    async def _serve_public(self) -> None:
        """The listener beyond loopback: the same door app, TLS when asked."""
        listener, sock = self.options.listener, self._public_socket
        if listener is None or sock is None or self.door is None:
            return
        self._public_server = DoorServer.for_app(
            self.door.app, stop_seconds=SERVER_STOP_SECONDS,
            tls_cert=str(listener.tls_cert) if listener.tls_cert else None,
            tls_key=str(listener.tls_key) if listener.tls_key else None)
        self._public_task = asyncio.create_task(
            self._public_server.serve(sockets=[sock]), name="murmur-door-public")
        async with asyncio.timeout(HEALTH_SECONDS):
            while not self._public_server.started and not self._public_task.done():
                await asyncio.sleep(0.005)
        if self._public_task.done():
            exc = None if self._public_task.cancelled() else self._public_task.exception()
            raise StartFailed(member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem=f"the door's {listener.flag} "
                f"listener stopped: {type(exc).__name__}: {exc}",
                fix="see the lines above; run it again"))

    def _say_ready(self) -> bool:
        records = self.records
        assert records is not None
        if self.out is None:
            return True
        place = self.place
        if self.options.json:
            line: dict[str, Any] = {
                "event": "ready", "session_id": self.plan.session_id, "pid": os.getpid(),
                "door_url": self.door_url, "capsule": self.options.capsule,
                "version": self.options.version, "records_dir": str(records.dir)}
            if self.public_url is not None:
                line["public_url"] = self.public_url
            if place.formation_id is not None:
                line["formation_id"] = place.formation_id
                if place.member is not None:  # None: started by hand (W-RUN-007)
                    line["member"] = place.member
            text = json.dumps(line, separators=(",", ":"))
        else:
            member = f" as member {place.member} of {place.formation_id}" \
                if place.member else ""
            text = (f"mur run: {self.options.capsule} {self.options.version} is ready at "
                    f"{self.door_url}{member} (session {self.plan.session_id}; operator "
                    f"token in {records.operator_token})")
            if self.options.task is not None:
                # A person's --task run: stdout holds the result alone, so that
                # `answer=$(mur run ... --task ...)` is the answer. With --json (what the
                # launcher and scripts use) the readiness line stays the first stdout line.
                with contextlib.suppress(OSError, ValueError):
                    print(text, file=sys.stderr, flush=True)
                return True
        return self.out.line(text)

    # --------------------------------------------------------------------- watching

    def _watch(self) -> None:
        door = self.door
        assert door is not None
        tasks = self._watchers.tasks
        tasks.append(asyncio.create_task(self._watch_stop(door), name="murmur-stop-watch"))
        tasks.append(asyncio.create_task(self._watch_server(), name="murmur-server-watch"))
        if self._upstream is not None and self._upstream.process is not None:
            tasks.append(asyncio.create_task(self._watch_upstream(self._upstream),
                                             name="murmur-upstream-watch"))
        if self.place.lifeline is not None:
            tasks.append(asyncio.create_task(self._watch_lifeline(self.place.lifeline),
                                             name="murmur-lifeline"))
        seconds = idle_timeout(self.manifest, self.options, self.place)
        if seconds is not None:
            tasks.append(asyncio.create_task(self._watch_idle(door, seconds),
                                             name="murmur-idle-watch"))
        deadline = self.options.deadline
        if deadline is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, (deadline - datetime.now(deadline.tzinfo)).total_seconds())
            self._watchers.deadline = loop.call_later(delay, self.trigger, Cause.DEADLINE)

    async def _watch_stop(self, door: Door) -> None:
        await door.stop_requested.wait()
        cause = Cause.STOP_SESSION if door.stop_reason == "stop_session" else Cause.AFTER_TASK
        self.trigger(cause)

    async def _watch_server(self) -> None:
        task = self._server_task
        assert task is not None
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(task)
        if self.ending is None:
            self.trigger(Cause.FAILURE, failure=member_diagnostic(
                SESSION_NOT_STAGED, action="served", problem="the door stopped serving",
                fix="see the lines above; run it again"))

    async def _watch_upstream(self, upstream: Upstream) -> None:
        failure = await upstream.exited()
        if self.ending is None:
            self.trigger(Cause.FAILURE, failure=failure)

    async def _watch_task(self, task_id: str) -> None:
        assert self.door is not None
        await self.door.result(task_id)
        self.trigger(Cause.TASK_DONE)

    async def _watch_idle(self, door: Door, seconds: int) -> None:
        loop = asyncio.get_running_loop()
        busy_at = loop.time()
        while True:
            await asyncio.sleep(min(1.0, seconds / 4))
            now = loop.time()
            if door.held or self._live:
                busy_at = now
            elif now - busy_at >= seconds:
                self.trigger(Cause.IDLE_TIMEOUT)
                return

    async def _watch_lifeline(self, fd: int) -> None:
        await wait_for_eof(fd)
        peer = not self.place.entry
        diverted = peer and self._divert_if_launcher_gone()
        if self.trigger(Cause.LIFELINE):
            self._watchdog.arm()
        if peer and not diverted:
            # The kernel closes a dead launcher's descriptors before it reparents its
            # children: look a little longer (the wind-down may cancel this first).
            loop = asyncio.get_running_loop()
            until = loop.time() + LAUNCHER_GONE_SECONDS
            while loop.time() < until and not self._divert_if_launcher_gone():
                await asyncio.sleep(0.05)

    def _divert_if_launcher_gone(self) -> bool:
        """A peer whose launcher is gone writes its diagnostics to logs/bootstrap.log."""
        records = self.records
        if records is None or not launcher_gone(self.plan.launcher_pid):
            return False
        with contextlib.suppress(OSError):
            divert_stderr_to(records.bootstrap_log)
            if self.out is not None:
                self.out.follow_stderr()
        return True

    # --------------------------------------------------------------------- ending

    def trigger(self, cause: Cause, *, detail: str = "",
                failure: Diagnostic | None = None) -> bool:
        """End the session for ``cause``, unless it is already ending (then nothing
        changes). Returns True when this cause is the one that ends it."""
        if self.ending is not None:
            return False
        door = self.door
        if cause in (Cause.AFTER_TASK, Cause.STOP_SESSION) and self._task_over():
            cause = Cause.TASK_DONE  # the --task task ended: its state decides
        if cause is Cause.LIFELINE:
            self.bus.emit("formation_ended", formation_id=self.place.formation_id)
        elif cause is Cause.DEADLINE:
            assert self.options.deadline is not None
            self.bus.emit("deadline_reached", deadline=timestamp(self.options.deadline))
        running = self.running_tasks()
        self.ending = Ending(cause, running, detail, failure)
        if door is not None:
            reason = CANCEL_REASONS[cause]
            if cause is Cause.SIGNAL and detail:
                reason = f"the session was stopped by {detail}"
            door.wind_down(reason)
        self._ended.set()
        return True

    def _task_over(self) -> bool:
        if self.task_id is None or self.door is None:
            return False
        return self.door.task(self.task_id)["status"]["state"] in TERMINAL_STATES

    def _task_ended(self, task: dict[str, Any]) -> None:
        """Each task that ends leaves its result in out/result.txt (the last one wins;
        the ``--task`` task's is written again at the end)."""
        if self.task_id is None or task.get("id") == self.task_id:
            self._write_result(result_text(task))

    def _write_result(self, text: str) -> Diagnostic | None:
        """Replace ``out/result.txt`` with ``text``; on failure remove the old file (it
        must not pass for this task's answer) and report E-RUN-048, which is returned."""
        records = self.records
        if records is None:
            return None
        data = (text if text.endswith("\n") or not text else text + "\n").encode(
            "utf-8", "replace")
        try:
            write_atomic(records.result, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(records.result)
            failure = file_not_written(
                records.result, exc, what="the task's result",
                note="the previous result.txt was removed, so it holds no earlier answer")
            self._write_failed(records.result, failure)
            return failure
        self._unwritten.discard(str(records.result))
        return None

    def _write_failed(self, path: Path, failure: Diagnostic) -> None:
        """Report ``failure`` unless the last write of ``path`` failed and said so."""
        if str(path) not in self._unwritten:
            self._unwritten.add(str(path))
            self._report(failure)

    async def _finish(self) -> SessionOutcome:
        ending = self.ending
        assert ending is not None and self.records is not None
        self._watchers.cancel()
        final: dict[str, Any] | None = None
        unwritten: Diagnostic | None = None
        try:
            if self.door is not None:
                await _bounded(self.door.drained(), DRAIN_SECONDS)
                if self.task_id is not None:
                    final = self.door.task(self.task_id)
                    unwritten = self._write_result(result_text(final))
            outcome = decide(ending, session_id=self.plan.session_id,
                             deadline=timestamp(self.options.deadline)
                             if self.options.deadline else "",
                             task=final, result_path=str(self.records.result))
            if unwritten is not None and outcome.exit_code == 0:
                # --task promises its answer in result.txt: without it the run failed.
                outcome = SessionOutcome(1, "failed", unwritten)
            if outcome.diagnostic is not None and outcome.diagnostic is not unwritten:
                self._report(outcome.diagnostic)
            self.bus.emit("session_end", exit_status=outcome.exit_status, code=outcome.code,
                          reason=ending.cause.value)
        finally:
            await self._close()
        if final is not None and self.out is not None:
            self.out.line(result_text(final))
        return outcome

    async def _close(self) -> None:
        """Stop serving and let go of everything; the running record goes last."""
        try:
            if self.door is not None:
                self.door.close_streams()
            if self._public_server is not None and self._public_task is not None:
                self._public_server.stop()
                await _bounded(asyncio.shield(self._public_task), SERVER_STOP_SECONDS)
                if not self._public_task.done():
                    self._public_task.cancel()
            elif self._public_socket is not None:
                self._public_socket.close()
            if self._server is not None and self._server_task is not None:
                self._server.stop()
                await _bounded(asyncio.shield(self._server_task), SERVER_STOP_SECONDS)
                if not self._server_task.done():
                    self._server.force_exit = True
                    self._server_task.cancel()
            elif self._socket is not None:
                self._socket.close()
            if self.door is not None:
                await _bounded(self.door.aclose(), 2.0)
            if self._upstream is not None:
                await _bounded(self._upstream.stop(), UPSTREAM_STOP_SECONDS)
            if self._agent is not None:
                await _bounded(self._agent.close(), 10.0)
            self._release_warm_child()
            # Whatever agent code started and left behind (a daemon that forked twice
            # and called setsid) was re-parented here: it ends with the member.
            if self._cgroup is not None:
                await asyncio.to_thread(self._cgroup.remove)
            await asyncio.to_thread(descendants.end_descendants)
            if self._proxy is not None:
                await _bounded(self._proxy.close(), 2.0)
            if self._seam is not None:
                await _bounded(self._seam.aclose(), 2.0)
            if self._directory is not None:
                self._directory.close()
            close_place(self.place)
            if self._span_export is not None:   # after session_end: the last spans out
                await _bounded(asyncio.to_thread(self._span_export.close), SPAN_FLUSH_SECONDS)
        finally:
            remove_running(self.plan.session_id)
            if self.writer is not None:
                self.writer.close()
            self._close_log()

    def _release_warm_child(self) -> None:
        """A warm agent process nobody will use (a gateway member, a failed start)
        ends when its socketpair closes."""
        child, self.plan.agent_child = self.plan.agent_child, None
        if child is not None:
            child.sock.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child.pid, 0)
            descendants.release(child.pid)

    def _close_early(self) -> None:
        self._release_warm_child()
        for sock in (self._socket, self._public_socket):
            if sock is not None:
                sock.close()
        remove_running(self.plan.session_id)
        if self.writer is not None:
            self.writer.close()
        self._close_log()
        close_place(self.place)

    def _close_log(self) -> None:
        if self._log is not None:
            close_member_log(self._log)
            self._log = None

    def _report(self, diagnostic: Diagnostic) -> None:
        with contextlib.suppress(OSError, ValueError):
            emit(diagnostic, self.plan.diagnostics, json_mode=self.options.diagnostics_json)


# ------------------------------------------------------------------------- helpers


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


async def _bounded(awaitable: Awaitable[Any], seconds: float) -> None:
    """Wait for ``awaitable`` at most ``seconds``; its failure is not this caller's."""
    with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
        await asyncio.wait_for(awaitable, seconds)


def stream_limits() -> StreamLimits:
    """The door's stream bounds: the defaults, within the room its connection cap leaves."""
    from launcher.member.http_limits import DoorLimits, connection_cap, stream_room

    room = stream_room(connection_cap(DoorLimits().connections))
    defaults = StreamLimits()
    return StreamLimits(per_owner=min(defaults.per_owner, room),
                        per_task=min(defaults.per_task, room), total=min(defaults.total, room))
