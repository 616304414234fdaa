"""The member runtime: ``mur run --capsule NAME --capsule-version V`` (docs/member-runtime.md).

:func:`main` does the refusals that come before anything is staged, in this order:

1. the flags (:mod:`launcher.member.options`; usage errors exit 2);
2. the agent process is forked (:mod:`launcher.member.agent_process`), before any
   credential is read; then the formation environment (:mod:`launcher.member.place`):
   ``E-RUN-046`` for
   ``MURMUR_FORMATION_PEERS`` in its own environment and for every case of the
   formation channel, whose first line is read here, within 10 s; ``W-RUN-007`` for a
   member started by hand;
3. ``E-RUN-055`` for ``--isolation required`` on a host that cannot confine fully;
4. the capsule: looked up in the project store then the global store (``E-REG-*``),
   ``--capsule-sha256`` compared with the installed bytes (``E-RUN-047``);
5. ``--resume``: the session must be one of this work folder, not running, of this
   capsule (``E-RUN-044``);
6. only then, for a run that starts, ``W-SEC-013`` for an unsafe host and ``W-SEC-014``
   for agent code the host cannot confine fully (unless the launcher already printed
   them);

Then :class:`launcher.member.session.MemberSession` runs the session. Exit codes: 0 ok,
1 a failure with a code, 2 usage, 143 forced (a second SIGTERM; 20 s after the lifeline
closed). docs/member-runtime.md records the decisions the documents leave open.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from gateway.redaction import redact
from launcher.diagnostics import Diagnostic, DiagnosticError, emit
from launcher.ids import new_session_id
from launcher.member.agent_process import AgentChild, take_warm_fork
from launcher.member.options import (
    MemberOptions,
    diagnostics_as_json,
    options_from,
    work_folder,
)
from launcher.member.outcome import SESSION_NOT_STAGED, member_diagnostic
from launcher.member.place import FormationPlace, close_place, forget_descriptors, read_place
from launcher.member.shutdown import FORCED_EXIT, ProtocolOut, forced_status, lifeline_grace
from launcher.sandbox.agent_cgroup import remove_all
from launcher.sandbox.descendants import owning_descendants
from launcher.spawn.process import escape_control, forbid_inspection
from launcher.spawn.process_title import member_title, name_process
from launcher.spawn.run_flags import UsageError

if TYPE_CHECKING:
    from launcher.member.outcome import SessionOutcome
    from launcher.member.session import MemberSession

__all__ = ["main"]

#: How long the main thread leaves a hard exit under way to finish ending the process.
HARD_EXIT_WAIT = 5.0


def main(args: argparse.Namespace) -> int:
    """Run one member; returns its exit status."""
    forbid_inspection()  # before any credential is read (docs/isolation.md)
    json_mode = diagnostics_as_json(bool(getattr(args, "json", False)), os.environ)
    try:
        options = options_from(args)
    except UsageError as problem:
        _say(f"mur run: {problem}")
        return 2
    session_id = options.resume or new_session_id()
    launcher_pid = os.getppid()
    # The agent process, forked while this process holds no credential and runs no
    # event loop: it waits to be told what to run (launcher/member/agent_process.py).
    agent = take_warm_fork()
    try:
        place = read_place(os.environ, session_id=session_id,
                           resume=options.resume is not None)
    except DiagnosticError as refusal:
        _report(refusal.diagnostic, json_mode)
        agent.sock.close()
        return 1
    forget_descriptors(os.environ)
    # Named as what it is in ps and top, even when forked from the launcher's template.
    name_process(member_title(options.capsule, options.version, member=place.member,
                              formation_id=place.formation_id),
                 f"mur:{place.member or options.capsule.rsplit('/', 1)[-1]}")
    try:
        artifact = _admit(options, place, session_id, json_mode)
    except DiagnosticError as refusal:
        _report(refusal.diagnostic, json_mode)
        close_place(place)
        agent.sock.close()
        return 1
    return _run(options, place, artifact, session_id, launcher_pid, agent)


def _admit(options: MemberOptions, place: FormationPlace, session_id: str,
           json_mode: bool) -> Any:
    """Warnings, then the installed artifact this member runs (refusals raise)."""
    from launcher.admission.agent_check import missing_requirements, pip_install
    from launcher.admission.store import resolve
    from launcher.sandbox.hostcheck import host_diagnostics
    from launcher.sandbox.isolation import isolation_diagnostics
    from launcher.spawn.listen_flags import check_listener

    for warning in place.warnings:
        _report(warning, json_mode)
    host_warnings = [*host_diagnostics(os.environ),
                     *isolation_diagnostics(options.isolation, os.environ)]  # or E-RUN-055
    if options.listener is not None:
        check_listener(options.listener)  # E-RUN-056 before anything is staged
    artifact = resolve(options.project, options.capsule, options.version)
    if options.sha256 is not None and artifact.sha256 != options.sha256:
        raise DiagnosticError("E-RUN-047", str(artifact.path), capsule=options.capsule,
                              version=options.version, found=artifact.sha256,
                              expected=options.sha256)
    requires = artifact.manifest.agent.requires
    missing = missing_requirements(requires)
    if missing:
        raise DiagnosticError("E-RUN-054", "agent.requires", capsule=options.capsule,
                              version=options.version, missing=", ".join(missing),
                              install=pip_install(requires))
    if options.resume is not None:
        _check_resumable(options, session_id)
    # Said only of a run that starts: a refusal above is about something else, and the
    # host's warnings before it would read as its cause.
    for warning in host_warnings:
        _report(warning, json_mode)
    return artifact


def _check_resumable(options: MemberOptions, session_id: str) -> None:
    """A resumed session is one of this work folder's, not running, of this capsule."""
    from launcher.home.records import session_records
    from launcher.home.running_records import is_running
    from launcher.home.trace import read_trace

    def refuse(problem: str, fix: str) -> DiagnosticError:
        return DiagnosticError(member_diagnostic(
            SESSION_NOT_STAGED, "--resume", action="resumed", problem=problem, fix=fix))

    try:
        records = session_records(work_folder(os.environ), session_id)
    except OSError as exc:
        raise refuse(f"the current directory is gone ({exc.strerror})",
                     "run `mur run --resume` in the folder the session ran in") from None

    if records.dir.is_symlink() or not records.dir.is_dir():
        raise refuse(f"there is no session {session_id} in this work folder "
                     f"({records.dir} does not exist)",
                     "run `mur run --resume` in the folder the session ran in")
    if is_running(session_id):
        raise refuse(f"session {session_id} is still running",
                     f"stop it first with `mur stop {session_id}`")
    try:
        first = next(iter(read_trace(records.trace)), {})
    except OSError:
        first = {}
    ran = (first.get("capsule"), first.get("version"))
    if first.get("event") == "session_start" and ran != (options.capsule, options.version):
        raise refuse(f"session {session_id} ran {ran[0]} {ran[1]}, not "
                     f"{options.capsule} {options.version}",
                     f"resume it with --capsule {ran[0]} --capsule-version {ran[1]}")


def _run(options: MemberOptions, place: FormationPlace, artifact: Any, session_id: str,
         launcher_pid: int, agent: AgentChild) -> int:
    from launcher.member.session import MemberSession, SessionPlan

    try:
        workdir = work_folder(os.environ)
    except OSError as exc:
        _report(member_diagnostic(SESSION_NOT_STAGED, action="staged",
                                  problem=f"the current directory is gone ({exc.strerror})",
                                  fix="run mur from a directory that exists"),
                options.diagnostics_json)
        close_place(place)
        agent.sock.close()
        return 1
    _quiet_logging()
    out = ProtocolOut()
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    plan = SessionPlan(options=options, artifact=artifact, place=place,
                       session_id=session_id, workdir=workdir, environ=dict(os.environ),
                       launcher_pid=launcher_pid, lifeline_grace=lifeline_grace(os.environ),
                       agent_child=agent)
    try:
        # Before any agent code runs: what it leaves behind comes here, and ends with it.
        with owning_descendants():
            try:
                outcome, clean = _run_loop(MemberSession(plan, out))
            finally:
                remove_all()  # a cgroup the session could not remove itself
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user
        _report(member_diagnostic(SESSION_NOT_STAGED, action="run",
                                  problem=f"{type(exc).__name__}: {exc}",
                                  fix="this is a fault in mur; report it with the session's "
                                      "trace.jsonl"), options.diagnostics_json)
        return 1
    finally:
        out.close()
        _settle_stdio()
    if forced_status() is not None:
        # A hard exit is under way in the watchdog's thread (it ended the agent process,
        # which let this teardown finish): it ends the process, with its status.
        time.sleep(HARD_EXIT_WAIT)
        os._exit(forced_status() or FORCED_EXIT)
    if not clean or _other_threads():
        # The session is recorded and its door closed; agent code that ignored being
        # cancelled, or a thread it left running, must not keep the process alive.
        os._exit(outcome.exit_code)
    return outcome.exit_code


def _run_loop(session: MemberSession) -> tuple[SessionOutcome, bool]:
    """Run the session in a loop of its own; (its outcome, whether every task of the
    loop ended once the stragglers were cancelled)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        outcome = loop.run_until_complete(session.run())
        return outcome, loop.run_until_complete(_wind_up(loop))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def _wind_up(loop: asyncio.AbstractEventLoop, seconds: float = 2.0) -> bool:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks(loop) if task is not current]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=seconds)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(loop.shutdown_asyncgens(), seconds)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(loop.shutdown_default_executor(), seconds)
    return all(task.done() for task in pending)


def _other_threads() -> bool:
    """Whether a thread other than the main one would hold the interpreter's exit."""
    import threading

    return any(thread.is_alive() and not thread.daemon
               for thread in threading.enumerate() if thread is not threading.main_thread())


def _settle_stdio() -> None:
    """Flush what agent code printed; a stream whose reader is gone is replaced, so the
    interpreter's own flush at exit cannot turn the exit status into 120."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            stream.flush()
        except (OSError, ValueError):
            setattr(sys, name, open(os.devnull, "w"))  # kept open until the process ends


# ------------------------------------------------------------------------- output


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _report(diag: Diagnostic, json_mode: bool) -> None:
    with contextlib.suppress(OSError, ValueError):
        emit(diag, sys.stderr, json_mode=json_mode)


class _OneLineFormatter(logging.Formatter):
    """A log line with the exception's class and text instead of a traceback: no
    traceback reaches a user, and nothing shaped like a token is printed. The message and
    the exception's text may be agent code's (its exception, its task's reason): their
    control characters are escaped, so they can neither write to the terminal nor start
    a line of their own."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return escape_control(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        kind, value = ei[0], ei[1]
        if getattr(value, "agent_type", ""):  # agent code's own: "Type: text" already
            return f"  {escape_control(str(value))}"
        name = kind.__name__ if kind is not None else "Exception"
        return f"  {name}: {escape_control(str(value))}" if str(value) else f"  {name}"

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return ""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _quiet_logging() -> None:
    """Warnings and errors of the door and uvicorn on stderr, one line each."""
    handler = logging.StreamHandler()  # sys.stderr at each write: follows a diverted fd 2
    handler.setFormatter(_OneLineFormatter("[mur run] %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
