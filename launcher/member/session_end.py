"""The end of a member's session: what it writes on the way, and how it finishes.

In order: :class:`SessionFiles`, the records directory once staged and what is written
into it while the session runs (the trace, each task's ``out/result.txt``) and said on
stderr; :func:`write_task_result`, the door's hook as each task ends; :func:`finish`,
which follows :meth:`launcher.member.session.MemberSession.trigger`: the agent code
drained, the ``--task`` task's result written again, the outcome decided
(:mod:`launcher.member.outcome`), ``session_end`` written, the session closed, the
capsule's earlier sessions past ``trace.retain`` removed (:func:`retain_sessions`) and
the result printed (control characters escaped, line breaks kept; ``result.txt`` keeps
the agent's text as it was);
:func:`close`, letting go of everything in its order, the running record last; and
:func:`close_early`, for a session that could not even be staged.

A file the session cannot write (a full disk, most often) is ``E-RUN-048`` naming it:
before the door is ready it ends the session; after, it is printed once per file until a
write of that file succeeds again, and a ``result.txt`` that cannot be written is removed
rather than left holding an earlier task's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.trace.bus import TraceRecord
from launcher.diagnostics import Diagnostic, emit
from launcher.home.files import write_atomic
from launcher.home.records import SessionRecords
from launcher.home.running_records import remove_running
from launcher.home.session_retention import format_session_removal, session_retention_pass
from launcher.home.trace import TraceWriter, timestamp
from launcher.member.member_log import close_member_log, open_member_log
from launcher.member.outcome import (
    Cause,
    SessionOutcome,
    decide,
    file_not_written,
    result_text,
)
from launcher.member.output_log import OutputLog
from launcher.member.place import close_place
from launcher.spawn.process import escape_lines

if TYPE_CHECKING:
    from launcher.member.session import MemberSession

#: How long the wind-down waits for agent code to stop after it was cancelled.
DRAIN_SECONDS = 15.0
#: The longest the session's end waits for its last spans to reach the OTLP collector.
SPAN_FLUSH_SECONDS = 4.0


class SessionFiles:
    """The session's records directory, and what the session writes and says after
    staging it: the trace (a sink of the bus), each task's result, its diagnostics."""

    def __init__(self, diagnostics: Any, *, json_mode: bool) -> None:
        self.records: SessionRecords | None = None
        self.writer: TraceWriter | None = None
        self._log: logging.Handler | None = None
        #: ``logs/output.log``: what the agent and the upstream print.
        self.output: OutputLog | None = None
        self._diagnostics = diagnostics
        self._json_mode = json_mode
        #: Files whose last write failed and was reported (E-RUN-048 is printed once).
        self._unwritten: set[str] = set()

    def open(self) -> None:
        """The trace and the member log, in the records directory just staged."""
        assert self.records is not None
        self.writer = TraceWriter(self.records.trace, session_id=self.records.session_id)
        self._log = open_member_log(self.records.member_log)
        self.output = OutputLog(self.records.output_log)

    def write_record(self, record: TraceRecord) -> None:
        writer = self.writer
        if writer is not None and not writer.closed:
            try:
                # The bus redacted every string of the record already: written once more
                # through the redactor would cost each record twice (docs/audit.md).
                writer.write_redacted(record["event"], record)
            except OSError as exc:  # a full disk must not fail the task that was traced
                self.write_failed(writer.path, file_not_written(
                    writer.path, exc, what="the session's trace"))
            else:
                if self._unwritten:
                    self._unwritten.discard(str(writer.path))

    def write_result(self, text: str) -> Diagnostic | None:
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
            self.write_failed(records.result, failure)
            return failure
        self._unwritten.discard(str(records.result))
        return None

    def write_failed(self, path: Path, failure: Diagnostic) -> None:
        """Report ``failure`` unless the last write of ``path`` failed and said so."""
        if str(path) not in self._unwritten:
            self._unwritten.add(str(path))
            self.report(failure)

    def report(self, diagnostic: Diagnostic) -> None:
        with contextlib.suppress(OSError, ValueError):
            emit(diagnostic, self._diagnostics, json_mode=self._json_mode)

    def say(self, line: str) -> None:
        """One plain line where the diagnostics go (stderr); a failed write is let go."""
        with contextlib.suppress(OSError, ValueError):
            print(line, file=self._diagnostics or sys.stderr, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._log is not None:
            close_member_log(self._log)
            self._log = None
        if self.output is not None:
            self.output.close()
            self.output = None

    def take_output(self, source: str, data: bytes) -> None:
        """What ``source`` (the agent, the upstream) printed, for ``logs/output.log``."""
        if self.output is not None:
            self.output.take(source, data)


def write_task_result(session: MemberSession, task: dict[str, Any]) -> None:
    """Each task that ends leaves its result in out/result.txt (the last one wins; the
    ``--task`` task's is written again at the end)."""
    if session.task_id is None or task.get("id") == session.task_id:
        session.files.write_result(result_text(task))


def _said_by_the_entry_member(session: MemberSession, cause: Cause) -> bool:
    """A peer that reaches the formation's deadline with every other member: the entry
    member says ``E-RUN-053`` for the formation (the peer's is in its trace), so the
    launcher's terminal shows it once, not once a member."""
    place = session.place
    return (cause is Cause.DEADLINE and place.formation_id is not None
            and not place.entry and not place.delegated)


async def finish(session: MemberSession) -> SessionOutcome:
    """The session after :meth:`~launcher.member.session.MemberSession.trigger`: drain,
    decide, write ``session_end``, close; the ``--task`` result is printed last."""
    ending, records, files = session.ending, session.records, session.files
    assert ending is not None and records is not None
    session.watchers.cancel()
    final: dict[str, Any] | None = None
    unwritten: Diagnostic | None = None
    try:
        if session.door is not None:
            await bounded(session.door.drained(), DRAIN_SECONDS)
        if session.agent_side.seam is not None:  # calls that outlived their tasks, children
            await bounded(session.agent_side.seam.end_calls(), 6.0)
        if session.door is not None and session.task_id is not None:
            final = session.door.task(session.task_id)
            unwritten = files.write_result(result_text(final))
        deadline = session.options.deadline
        outcome = decide(ending, session_id=session.plan.session_id,
                         deadline=timestamp(deadline) if deadline else "",
                         task=final, result_path=str(records.result))
        if unwritten is not None and outcome.exit_code == 0:
            # --task promises its answer in result.txt: without it the run failed.
            outcome = SessionOutcome(1, "failed", unwritten)
        if (outcome.diagnostic is not None and outcome.diagnostic is not unwritten
                and not _said_by_the_entry_member(session, ending.cause)):
            files.report(outcome.diagnostic)
        session.bus.emit("session_end", exit_status=outcome.exit_status, code=outcome.code,
                         reason=ending.cause.value)
    finally:
        await close(session)
    retain_sessions(session)
    if final is not None and session.out is not None:
        # Agent text on the terminal of whoever ran `mur run --task` (the launcher copies
        # the entry member's stdout as it is): it must not write there (OSC 52, a cursor
        # move, a forged line).
        session.out.line(escape_lines(result_text(final)))
    return outcome


def retain_sessions(session: MemberSession) -> None:
    """The capsule's ``trace.retain`` applied to its sessions in the records folder this
    one ran in (:mod:`launcher.home.session_retention`), once this session is closed;
    each removal said on stderr."""
    retain = session.manifest.trace.retain
    records = session.records
    if records is None or (retain.max_sessions is None and retain.max_age is None):
        return
    try:
        removals = session_retention_pass(
            sessions_dir=records.dir.parent, capsule=session.options.capsule,
            current_session_id=session.plan.session_id, max_sessions=retain.max_sessions,
            max_age=None if retain.max_age is None else timedelta(seconds=retain.max_age))
    except OSError as exc:
        session.files.say(f"[mur run] warning: the retention pass failed "
                          f"({exc.strerror or exc})")
        return
    for removal in removals:
        session.files.say(format_session_removal(removal))


async def close(session: MemberSession) -> None:
    """Stop serving and let go of everything; the running record goes last."""
    try:
        if session.door is not None:
            session.door.close_streams()
        await session.listeners.stop()
        if session.door is not None:
            await bounded(session.door.aclose(), 2.0)
        await session.agent_side.close()
        if session.task_db is not None:   # after the door: its last changes written
            await bounded(asyncio.to_thread(session.task_db.close), 5.0)
        close_place(session.place)
        span_export = session.span_export
        if span_export is not None:   # after session_end: the last spans out
            await bounded(asyncio.to_thread(span_export.close), SPAN_FLUSH_SECONDS)
    finally:
        remove_running(session.plan.session_id)
        session.files.close()


def close_early(session: MemberSession) -> None:
    """Let go of what a session that could not be staged holds."""
    session.agent_side.release_warm_child()
    session.listeners.close_sockets()
    remove_running(session.plan.session_id)
    session.files.close()
    close_place(session.place)


async def bounded(awaitable: Awaitable[Any], seconds: float) -> None:
    """Wait for ``awaitable`` at most ``seconds``; its failure is not this caller's."""
    with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
        await asyncio.wait_for(awaitable, seconds)
