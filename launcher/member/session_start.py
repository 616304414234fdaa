"""The start of a member's session: staging it, then starting its agent and its door.

In order: :class:`StartFailed`, what every step here raises when the session cannot
start; :func:`stage`, which binds the door's sockets, stages the records directory
(``operator.token`` at 0600), opens the trace, writes the running record and says
``session_start``, so that both already carry the door's URL; then :class:`AgentSide`,
which unpacks the capsule, reserves the forward proxy, and starts the agent process (the
warm fork ``main`` took, else a new one) or a gateway member's upstream, confined
(docs/isolation.md) and in a cgroup of its own where one can be made, and builds the door
in front of it with :func:`door_settings` and :func:`door_policy`. What the agent side
holds stays until :func:`launcher.member.session_end.close` lets go of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.streams import StreamLimits
from launcher.admission.store import unpack
from launcher.diagnostics import Diagnostic
from launcher.errors import LauncherError
from launcher.home.records import (
    SessionRecords,
    session_records,
    stage_session,
    write_operator_token,
)
from launcher.home.running_records import RunningRecord, now_iso, write_running
from launcher.home.trace import timestamp
from launcher.member.agent_process import AgentProcess, AgentStartFailed
from launcher.member.door import (
    CallsSeam,
    agent_environment,
    auth_policy,
    card_info,
    gate_config,
    process_environment,
    task_env,
)
from launcher.member.instructions import CAPSULE_INSTRUCTIONS, write_session_instructions
from launcher.member.outcome import (
    CAPSULE_NOT_RUNNABLE,
    TASK_DB_UNREADABLE,
    file_not_written,
    member_diagnostic,
)
from launcher.member.proxy_slot import ProxySlot
from launcher.member.session_end import bounded
from launcher.member.source_paths import SourcePaths
from launcher.member.span_export import start_span_export
from launcher.sandbox import descendants
from launcher.sandbox.agent_cgroup import AgentCgroup
from launcher.sandbox.isolation import OFF
from launcher.sandbox.landlock import host_support
from launcher.spawn.channel import DoorDirectory
from launcher.spawn.process import process_start_time

if TYPE_CHECKING:  # imported when a member needs them: httpx and aiohttp cost a start CPU
    from gateway.proxy.forward import ForwardProxy
    from gateway.proxy.inference import InferenceEgress
    from launcher.home.task_db import StoredTask, TaskDb
    from launcher.member.confinement import AgentPlan
    from launcher.member.delegation.delegator import Delegator
    from launcher.member.session import MemberSession
    from launcher.member.upstream import Upstream

#: How long ending a gateway member's upstream may take (SIGTERM, SIGKILL 5 s later).
UPSTREAM_STOP_SECONDS = 11.0


class StartFailed(LauncherError):
    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


# --------------------------------------------------------------------- staging


def stage(session: MemberSession) -> None:
    """Bind the door's sockets, stage the records and say ``session_start``."""
    plan, options, files = session.plan, session.options, session.files
    session.listeners.bind()
    try:
        records = stage_session(plan.workdir, plan.session_id,
                                resume=options.resume is not None)
        files.records = records
        write_operator_token(records.operator_token, session.operator.value,
                             replace=options.resume is not None)
        files.open()
    except OSError as exc:
        raise StartFailed(file_not_written(
            exc.filename or "the records directory", exc,
            what="the session's records")) from None
    session.bus.add_sink(files.write_record)
    session.bus.add_sink(session.tasks.track)
    session.span_export = start_span_export(
        member=session.place.member or options.capsule, session_id=plan.session_id,
        formation_id=session.place.formation_id)
    if session.span_export is not None:
        session.bus.add_sink(session.span_export)
    try:
        write_running(_running_record(session, records))
    except OSError as exc:
        raise StartFailed(file_not_written(
            exc.filename or "the running record", exc,
            what="the running record")) from None
    session.bus.emit("session_start", **_start_fields(session, records))
    if options.restarted_from is not None:
        session.bus.emit("member_restarted", member=session.place.member,
                         restarted_from=options.restarted_from, restart=options.restart_count)


def _running_record(session: MemberSession, records: SessionRecords) -> RunningRecord:
    pid, options, place = os.getpid(), session.options, session.place
    return RunningRecord(
        id=session.plan.session_id, pid=pid, start=process_start_time(pid), kind="session",
        formation_id=place.formation_id, member=place.member,
        door_url=session.door_url, records_dir=str(records.dir),
        public_url=session.public_url, project_dir=os.path.realpath(options.project),
        capsule=options.capsule, version=options.version, started=now_iso(),
        parent_session=place.lineage.parent_session if place.lineage else None,
        restarts=options.restart_count)


def _start_fields(session: MemberSession, records: SessionRecords) -> dict[str, Any]:
    options, place = session.options, session.place
    fields: dict[str, Any] = {
        "session_id": session.plan.session_id, "capsule": options.capsule,
        "version": options.version, "sha256": session.plan.artifact.sha256,
        "pid": os.getpid(), "workdir": str(records.workdir),
        "records_dir": str(records.dir), "door_url": session.door_url,
    }
    if options.resume is not None:
        fields["resumed"] = True
    if options.restarted_from is not None:
        fields.update(restarted_from=options.restarted_from, restart=options.restart_count)
    if options.deadline is not None:
        fields["deadline"] = timestamp(options.deadline)
    if place.formation_id is not None:
        fields["formation_id"] = place.formation_id
    if place.member is not None:
        fields["formation_member"] = place.member
        fields["formation_callees"] = list(place.callees)
    lineage = place.lineage
    if lineage is not None:   # a delegated child (docs/delegation.md)
        fields.update(parent_session=lineage.parent_session,
                      delegated_by=lineage.delegated_by, delegation_depth=lineage.depth)
    return fields


# --------------------------------------------------------------------- the agent side


class AgentSide:
    """The agent process (or a gateway member's upstream) and what it reaches the world
    through: the formation's door directory, the calls seam, the forward proxy; and the
    cgroup its processes run in."""

    def __init__(self, session: MemberSession) -> None:
        self.session = session
        self.directory: DoorDirectory | None = None
        self.seam: CallsSeam | None = None
        self.proxy: ProxySlot | None = None
        self.agent: AgentProcess | None = None
        self.upstream: Upstream | None = None
        #: The agent side's cgroup, where one can be made (launcher/sandbox/agent_cgroup.py).
        self.cgroup: AgentCgroup | None = None
        #: The session's MURMUR.md, as written into home/ (launcher/member/instructions.py).
        self.instructions = ""

    async def start(self) -> Door | None:
        """Unpack the capsule, start its agent (or upstream) and build the door in front
        of it; None when the session was ended meanwhile."""
        session = self.session
        records = session.records
        assert records is not None
        self._start_directory()
        self._unpack(records)
        self.seam = self._calls_seam()
        if session.manifest.agent.a2a is not None:
            return await self._start_gateway(records)
        agent = await self._start_agent(records)
        if session.ending is not None:
            return None
        settings = door_settings(session, records)
        task_db = open_task_db(session, records, settings.max_finished_tasks)
        earlier = earlier_tasks(session, task_db)
        if earlier:
            session.bus.emit("tasks_restored", tasks=len(earlier),
                             failed=sum(not task.terminal for task in earlier))
        settings = dataclasses.replace(settings, journal=task_db, earlier_tasks=earlier)
        return build_door(agent, settings, policy=door_policy(session, records),
                          trace=session.bus, metrics=session.metrics)

    def _start_directory(self) -> None:
        credentials = self.session.place.credentials
        if credentials is not None:
            self.directory = DoorDirectory.for_channel(credentials)
            self.directory.start()
        else:
            self.directory = DoorDirectory()

    def _unpack(self, records: SessionRecords) -> None:
        capsule_dir = records.dir / "capsule"
        if self.session.options.resume is not None and capsule_dir.exists():
            shutil.rmtree(capsule_dir, ignore_errors=True)
        try:
            unpack(self.session.plan.artifact, capsule_dir)
        except OSError as exc:
            shutil.rmtree(capsule_dir, ignore_errors=True)
            raise StartFailed(file_not_written(
                exc.filename or capsule_dir, exc, what="the capsule",
                note="its partly unpacked folder was removed")) from None
        options, place = self.session.options, self.session.place
        try:
            model = self.session.manifest.agent.model
            self.instructions = write_session_instructions(
                capsule_dir, records.home, capsule=options.capsule, version=options.version,
                source=model.instructions if model is not None and model.instructions
                else CAPSULE_INSTRUCTIONS,
                member=place.member, formation_id=place.formation_id, callees=place.callees)
        except OSError as exc:
            raise StartFailed(file_not_written(
                exc.filename or records.home / "MURMUR.md", exc,
                what="the session's MURMUR.md")) from None

    def _calls_seam(self) -> CallsSeam:
        session = self.session
        assert self.directory is not None
        return CallsSeam(manifest=session.manifest, place=session.place,
                         directory=self.directory, trace=session.bus,
                         spans=session.tasks.spans.get, metrics=session.metrics,
                         deadline=session.options.deadline,
                         capsule=session.options.capsule, delegator=self._delegator(),
                         call_depth=session.tasks.call_depth, inference=self._inference())

    def _inference(self) -> Callable[[], InferenceEgress] | None:
        """A model member's endpoint as the runtime's egress: its key read here, from
        the runtime's environment, and its counts kept here (docs/llm.md)."""
        session = self.session
        if session.manifest.agent.model is None:
            return None
        from launcher.member.model.egress import egress_factory

        credentials = session.place.credentials
        bounds = credentials.bounds if credentials is not None else None
        return egress_factory(session.manifest, session.plan.environ, trace=session.bus,
                              member_tokens=bounds.tokens if bounds is not None else None)

    def _delegator(self) -> Delegator | None:
        """The session's children (docs/delegation.md): a python agent whose
        ``capabilities.spawn.allow`` names a capsule may delegate."""
        session = self.session
        manifest, records, options = session.manifest, session.records, session.options
        spawn = manifest.capabilities.spawn
        if not spawn.allow or not manifest.agent.runs_turns or records is None:
            return None
        from launcher.member.delegation.delegator import Delegator, DelegatorPlace
        from launcher.member.delegation.grant import SpawnGrant
        from launcher.member.delegation.lineage import Lineage

        place = session.place
        return Delegator(
            grant=SpawnGrant.of(spawn.allow), max_children=spawn.max_children,
            max_depth=spawn.max_depth, lineage=place.lineage or Lineage(), trace=session.bus,
            place=DelegatorPlace(
                session_id=session.plan.session_id,
                delegated_by=place.member or options.capsule,
                project=Path(os.path.realpath(options.project)), workdir=records.workdir,
                records_dir=records.dir, formation_id=place.formation_id,
                deadline=timestamp(options.deadline) if options.deadline else None,
                environ=dict(os.environ)))

    def _reserve_proxy(self) -> ProxySlot:
        """The forward proxy every agent process reaches the formation and the network
        through (docs/proxy.md, "The forward proxy"): its port now, the proxy itself on
        its first connection."""
        slot = ProxySlot()
        self.proxy = slot
        slot.serve_when_reached(self._build_forward_proxy)
        return slot

    def _build_forward_proxy(self, secret: str) -> ForwardProxy:
        from gateway.proxy.forward import ForwardProxy

        assert self.seam is not None
        tasks = self.session.tasks
        return ForwardProxy(self.seam.transport, trust=tasks.live_trust, secret=secret,
                            task_trust=tasks.trusts.get)

    def _confinement(self, records: SessionRecords, proxy_port: int,
                     bind_ports: tuple[int, ...] = (), *,
                     programs: tuple[str, ...] = (), path: str | None = None
                     ) -> AgentPlan | None:
        """What agent code may touch (docs/isolation.md); None with ``--isolation off``.
        ``programs``: the commands' programs (``argv[0]``, found on ``path``), whose
        environments are read and execute too. On a host without Landlock or seccomp the
        agent side applies what there is (``auto`` warned of the rest; ``required``
        refused)."""
        if self.session.options.isolation == OFF:
            return None
        from launcher.home.paths import murmur_home
        from launcher.member.confinement import agent_plan, granted_already
        from launcher.sandbox.program_paths import program_environment, resolve_program
        from launcher.sandbox.seccomp import seccomp_support

        capsule_dir = records.dir / "capsule"
        also_read = list(self.session.manifest.capabilities.filesystem.read)
        for program in programs:
            found = resolve_program(program, cwd=capsule_dir, path=path, granted=lambda
                                    candidate: granted_already(candidate,
                                                               capsule_dir=capsule_dir))
            if found is not None:
                also_read += program_environment(found, path=path)
        return agent_plan(home=murmur_home(), capsule_dir=capsule_dir,
                          session_dirs=(records.home, records.tmp, records.out),
                          workdir=records.workdir, proxy_port=proxy_port,
                          bind_ports=bind_ports, seccomp=seccomp_support().available,
                          also_read=also_read)

    def _agent_cgroup(self) -> AgentCgroup | None:
        """The agent side's cgroup, made once, where this runtime owns its processes and
        may make one (docs/isolation.md, "Processes")."""
        if self.cgroup is None and descendants.owning():
            self.cgroup = AgentCgroup.make(self.session.plan.session_id)
        return self.cgroup

    async def _start_agent(self, records: SessionRecords) -> Any:
        """Start the agent process (the warm fork ``main`` took, else a new one), tell
        it what to run and how it is confined; the door's AgentFn."""
        session = self.session
        manifest, plan, options, place = session.manifest, session.plan, session.options, \
            session.place
        slot = self._reserve_proxy()
        env = task_env(manifest, plan.environ, place.callees)
        python = manifest.agent.runs_turns
        environment = agent_environment(
            manifest, place=place, env=env if python else slot.environment(env),
            deadline=options.deadline, workdir=records.workdir, home=records.home,
            tmp=records.tmp, instructions=self.instructions)
        confinement = self._confinement(records, slot.port, programs=manifest.agent.programs(),
                                        path=env.get("PATH"))
        start = {
            "agent": self._agent_wire(),
            "capsule_dir": str(records.dir / "capsule"),
            "environment": environment.wire(),
            "process_env": slot.environment(process_environment(
                plan.environ, env, home=records.home, tmp=records.tmp)),
            "proxy_url": slot.url, "peers": list(place.callees),
            "spawn": list(self.seam.delegator.capsules)
            if self.seam is not None and self.seam.delegator is not None else [],
            "workdir": str(records.workdir),
            # The ABI this runtime found (a test may have lowered it): the agent process
            # confines itself with no more than that.
            "confine": {**confinement.wire(), "abi": host_support().abi}
            if confinement is not None else None,
        }
        assert self.seam is not None
        process = AgentProcess(
            start, python=python, max_turns=manifest.inference.max_turns, trace=session.bus,
            calls_factory=self.seam.calls_for
            if python and (place.callees or self.seam.delegator is not None) else None,
            cgroup=self._agent_cgroup(), on_record=self._count_record,
            on_output=functools.partial(session.files.take_output, "agent"),
            label=self._output_label(),
            traceback_paths=SourcePaths.of(records.dir / "capsule", options.project,
                                           options.capsule, options.version).rewrite)
        self.agent = process
        child, plan.agent_child = plan.agent_child, None
        try:
            confined = await process.start(child)
        except AgentStartFailed as exc:
            raise StartFailed(member_diagnostic(
                CAPSULE_NOT_RUNNABLE, "agent", capsule=options.capsule,
                version=options.version, problem=str(exc))) from None
        session.bus.emit("agent_process_started", pid=process.pid,
                         isolation=options.isolation, **confined,
                         withheld=list(confinement.withheld) if confinement else [],
                         cgroup=str(self.cgroup.path) if self.cgroup else None)
        return process.agent_fn()

    def _output_label(self) -> str | None:
        """What the agent's output lines are put behind on this runtime's stderr: the
        member's name where that is the operator's terminal (a formation's entry, a
        member run alone); nothing for a peer, whose launcher puts the name there."""
        place = self.session.place
        if place.member is None:
            return self.session.options.capsule
        return place.member if place.entry else None

    def _agent_wire(self) -> dict[str, Any]:
        """What the agent process runs: a python entry, a command, or a model member's
        settings (launcher/member/model/settings.py)."""
        manifest, options = self.session.manifest, self.session.options
        agent = manifest.agent
        if agent.python is not None:
            return {"python": agent.python}
        if agent.model is not None:
            from launcher.member.model.settings import ModelSettings

            credentials = self.session.place.credentials
            bounds = credentials.bounds if credentials is not None else None
            return {"model": ModelSettings.of(
                agent.model, manifest.inference, content=manifest.trace.content,
                network_allow=manifest.capabilities.network.allow,
                capsule=options.capsule, version=options.version,
                member_tokens=bounds.tokens if bounds is not None else None).wire()}
        return {"command": list(agent.command or ())}

    def _count_record(self, event: str, fields: dict[str, Any]) -> None:
        """A model member's records counted in the door's metrics (docs/metrics.md)."""
        metrics = self.session.metrics
        if metrics is None:
            return
        member = self.session.place.member or self.session.options.capsule
        if event == "model_call":
            metrics.model_call(member, str(fields.get("model", "")),
                               _count(fields.get("input_tokens")),
                               _count(fields.get("output_tokens")))
        elif event == "tool_call":
            metrics.tool_run(member, str(fields.get("tool", "")),
                             str(fields.get("outcome", "")))

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

        session = self.session
        manifest, options, place = session.manifest, session.options, session.place
        agent = manifest.agent.a2a
        assert agent is not None
        allowed = task_env(manifest, session.plan.environ, ())
        spec = UpstreamSpec(agent=agent, capsule_dir=records.dir / "capsule",
                            member=place.member or options.capsule,
                            capsule=options.capsule, version=options.version)
        upstream = Upstream.prepare(spec, allowed)
        self.upstream = upstream
        self.release_warm_child()
        slot = self._reserve_proxy()
        env = slot.environment(upstream_environment(
            allowed, port=upstream.port, callees=place.callees, home=records.home,
            tmp=records.tmp))
        confinement = None
        if upstream.port is not None:
            confinement = self._confinement(records, slot.port, (upstream.port,),
                                            programs=(upstream.program(env),))
        await upstream.start(env, confinement=confinement, cgroup=self._agent_cgroup(),
                             output=functools.partial(session.files.take_output, "upstream"))
        waiting = asyncio.create_task(
            upstream.wait_for_card(_ready_seconds(options.deadline, READY_SECONDS)),
            name="murmur-upstream-card")
        ended = asyncio.create_task(session.ended.wait())
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
        card = upstream.card
        if manifest.agent.declares_input_modes:  # the capsule knows better than the card
            card = {**card, "defaultInputModes": list(manifest.agent.input_modes)}
        return build_gateway_door(client, card, door_settings(session, records),
                                  policy=door_policy(session, records), trace=session.bus,
                                  metrics=session.metrics)

    def release_warm_child(self) -> None:
        """A warm agent process nobody will use (a gateway member, a failed start)
        ends when its socketpair closes."""
        plan = self.session.plan
        child, plan.agent_child = plan.agent_child, None
        if child is not None:
            child.sock.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child.pid, 0)
            descendants.release(child.pid)

    async def close(self) -> None:
        """End the upstream or the agent process and whatever they left, then let go of
        the ways out they had."""
        if self.upstream is not None:
            await bounded(self.upstream.stop(), UPSTREAM_STOP_SECONDS)
        if self.agent is not None:
            await bounded(self.agent.close(), 10.0)
        self.release_warm_child()
        # Whatever agent code started and left behind (a daemon that forked twice
        # and called setsid) was re-parented here: it ends with the member.
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
        await asyncio.to_thread(descendants.end_descendants)
        if self.proxy is not None:
            await bounded(self.proxy.close(), 2.0)
        if self.seam is not None:
            await bounded(self.seam.aclose(), 2.0)
        if self.directory is not None:
            self.directory.close()


# --------------------------------------------------------------------- the door


def open_task_db(session: MemberSession, records: SessionRecords,
                 max_finished: int) -> TaskDb:
    """The session's tasks.db (docs/durable-tasks.md), bounded as the door's memory is,
    kept on the session to be closed at its end; ``E-RUN-067`` for a file there that is
    not one. With ``--discard-tasks`` the file there is first put aside, whatever it
    holds."""
    from launcher.home.task_db import TaskDb, TaskDbUnreadable, put_aside

    if session.options.discard_tasks:
        aside = put_aside(records.dir)
        if aside is not None:
            session.bus.emit("tasks_discarded", kept_as=aside.name)
    try:
        task_db = TaskDb.open(records.dir, max_finished=max_finished)
    except TaskDbUnreadable as exc:
        raise StartFailed(member_diagnostic(TASK_DB_UNREADABLE, problem=str(exc))) from None
    session.task_db = task_db
    return task_db


def earlier_tasks(session: MemberSession, task_db: TaskDb) -> tuple[StoredTask, ...]:
    """What the door starts with: a resumed session's tasks (its own tasks.db); a
    restarted member's, those of the session it follows (that session's tasks.db, read
    once: its rows are written into this session's as the door restores them); a new
    session's, nothing."""
    options = session.options
    if options.resume is None and options.restarted_from is None:
        return ()
    from launcher.home.task_db import TaskDb, TaskDbUnreadable

    try:
        if options.restarted_from is None:
            return tuple(task_db.load())
        earlier = session_records(session.plan.workdir, options.restarted_from)
        if not (earlier.dir / task_db.path.name).is_file():
            return ()
        before = TaskDb.open(earlier.dir, max_finished=task_db.max_finished)
        try:
            return tuple(before.load())
        finally:
            before.close()
    except TaskDbUnreadable as exc:
        raise StartFailed(member_diagnostic(TASK_DB_UNREADABLE, problem=str(exc))) from None


def door_settings(session: MemberSession, records: SessionRecords) -> DoorSettings:
    manifest = session.manifest
    return DoorSettings(
        card=card_info(manifest, session_id=session.plan.session_id, place=session.place,
                       door_url=session.door_url,
                       own_key=(session.options.card_key.public_bytes
                                if session.options.card_key is not None else None)),
        gate=gate_config(manifest, session.options), out_dir=records.out,
        streams=stream_limits(), push_allow=tuple(manifest.network.push.allow))


def door_policy(session: MemberSession, records: SessionRecords) -> AuthPolicy:
    """Who the door lets in; with ``--listen``, also on which port and host names."""
    options = session.options
    policy = auth_policy(session.manifest, operator=session.operator, place=session.place,
                         capsule_dir=records.dir / "capsule", environ=session.plan.environ,
                         capsule=options.capsule)
    listener, public = options.listener, session.listeners.public_port
    if listener is None or public is None:
        return policy
    return dataclasses.replace(policy, public_port=public,
                               public_hosts=listener.names())


def stream_limits() -> StreamLimits:
    """The door's stream bounds: the defaults, within the room its connection cap leaves."""
    from launcher.member.http_limits import DoorLimits, connection_cap, stream_room

    room = stream_room(connection_cap(DoorLimits().connections))
    defaults = StreamLimits()
    return StreamLimits(per_owner=min(defaults.per_owner, room),
                        per_task=min(defaults.per_task, room), total=min(defaults.total, room))


def _ready_seconds(deadline: datetime | None, budget: float) -> float:
    """``budget``, or less when the deadline comes first."""
    if deadline is None:
        return budget
    left = (deadline - datetime.now(deadline.tzinfo)).total_seconds()
    return max(0.0, min(budget, left))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
