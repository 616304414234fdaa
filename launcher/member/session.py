"""One member's session, from staging to ``session_end`` (docs/member-runtime.md).

:class:`MemberSession` holds what the parts of a session share, and :meth:`~MemberSession.run`
drives them in order:

1. start (:mod:`launcher.member.session_start`): the records directory staged
   (``operator.token`` at 0600, the running record, ``session_start``), then the door
   built in front of the agent or a gateway member's upstream;
2. serve (:mod:`launcher.member.session_serve`): the door served with uvicorn on
   ``127.0.0.1`` at a port of its own, the one readiness line printed once it answers,
   ``--task`` run as a task on its own door, and the watchers started;
3. end (:mod:`launcher.member.session_end`): after :meth:`~MemberSession.trigger`, on the
   first of a signal, ``murmur.StopSession``, ``after_task: exit``, the idle timeout,
   the lifeline closing, the deadline, or the ``--task`` task ending. The ending follows
   :mod:`launcher.member.outcome`; ``session_end`` is always written and the running
   record always removed.

A failure to start (:class:`StartFailed`, a refusal, a file that cannot be written)
ends the session like any other cause; one before the records are staged ends it at
once, reported and with nothing left behind.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.auth.credentials import OperatorToken
from gateway.door.app import Door
from gateway.metrics import DoorMetrics
from gateway.protocol import TERMINAL_STATES
from gateway.trace.bus import TraceBus
from launcher.admission.store import InstalledArtifact
from launcher.diagnostics import Diagnostic, DiagnosticError
from launcher.home.files import DISK_FULL_ERRNOS
from launcher.home.records import SessionRecords
from launcher.home.trace import timestamp
from launcher.member.agent_process import AgentChild
from launcher.member.options import MemberOptions
from launcher.member.outcome import (
    CANCEL_REASONS,
    SESSION_NOT_STAGED,
    Cause,
    Ending,
    SessionOutcome,
    file_not_written,
    member_diagnostic,
)
from launcher.member.place import FormationPlace
from launcher.member.server import DoorServer
from launcher.member.session_end import SessionFiles, close_early, finish
from launcher.member.session_serve import DoorListeners, LiveTasks, Watchers, ask_operator, serve
from launcher.member.session_start import AgentSide, StartFailed, stage
from launcher.member.shutdown import ExitFn, ProtocolOut, SignalGuard, Watchdog, hard_exit
from launcher.member.span_export import SpanExport
from launcher.sandbox import descendants

if TYPE_CHECKING:  # sqlite3 is imported when the door is built
    from launcher.home.task_db import TaskDb


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
        #: The door's metrics (GET /metrics), which the member's proxies count into too.
        self.metrics = DoorMetrics()
        self.door: Door | None = None
        #: The ``--task`` task, once the door took it.
        self.task_id: str | None = None
        self.ending: Ending | None = None
        #: Set by :meth:`trigger`: what :meth:`run` waits for before it ends the session.
        self.ended = asyncio.Event()
        self.watchdog = Watchdog(plan.lifeline_grace, exit_fn=plan.exit_fn)
        self.span_export: SpanExport | None = None
        #: The session's tasks.db (launcher/home/task_db.py), once its door is built.
        self.task_db: TaskDb | None = None
        # The parts, each holding what it alone looks after.
        self.files = SessionFiles(plan.diagnostics, json_mode=self.options.diagnostics_json)
        self.tasks = LiveTasks(on_input_required=functools.partial(ask_operator, self))
        self.listeners = DoorListeners(self.options.listener)
        self.agent_side = AgentSide(self)
        self.watchers = Watchers(self)

    @property
    def records(self) -> SessionRecords | None:
        return self.files.records

    @property
    def door_url(self) -> str:
        return self.listeners.url

    @property
    def public_url(self) -> str | None:
        """The door's URL for clients beyond loopback (``--listen``), or None."""
        return self.listeners.public_url

    @property
    def _server(self) -> DoorServer | None:
        """The loopback server (tests wait for it to have started)."""
        return self.listeners.server

    # --------------------------------------------------------------------- the run

    async def run(self) -> SessionOutcome:
        loop = asyncio.get_running_loop()
        guard = SignalGuard(loop, self._on_signal, with_interrupts=self.place.lifeline is None,
                            exit_fn=self.plan.exit_fn, on_child=descendants.reap_orphans)
        if self.plan.install_signals:
            guard.install()
        try:
            try:
                stage(self)
            except StartFailed as failed:
                close_early(self)
                outcome = SessionOutcome(1, "failed", failed.diagnostic)
                self.files.report(failed.diagnostic)
                return outcome
            try:
                await self._start_and_serve()
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
            await self.ended.wait()
            return await finish(self)
        finally:
            guard.restore()

    async def _start_and_serve(self) -> None:
        door = await self.agent_side.start()
        if door is None:  # the session ended while the agent or its upstream came up
            return
        self.door = door
        await serve(self, door)

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

    def running_tasks(self) -> tuple[str, ...]:
        """The tasks whose agent code runs now (queued ones are not running)."""
        return self.tasks.running()

    # --------------------------------------------------------------------- the ending

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
        elif cause is Cause.SPAWNER:
            self.bus.emit("spawner_ended", parent_session=self.place.lineage.parent_session
                          if self.place.lineage else None)
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
        self.ended.set()
        return True

    def _task_over(self) -> bool:
        if self.task_id is None or self.door is None:
            return False
        return self.door.task(self.task_id)["status"]["state"] in TERMINAL_STATES
