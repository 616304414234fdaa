"""``mur logs``: each session's own log and its bootstrap log, every line behind its
member's name, for a formation or one session; ``--follow`` until it ends."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from launcher.commands.common import failer, not_an_id
from launcher.home.running_records import is_running
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.process import escape_control

#: How often ``mur logs --follow`` looks for new lines.
FOLLOW_POLL = 0.25


def _log_files(ident: str) -> list[tuple[str, Path]]:
    """(label, log file) of each session of a formation, or of one session: its
    ``logs/member.log`` then ``logs/bootstrap.log``, whether or not they exist yet."""
    from launcher.home.records import MEMBER_LOG
    from launcher.home.trace import find_formation_traces, find_session_trace

    if is_formation_id(ident):
        traces = find_formation_traces(ident)
    else:
        trace = find_session_trace(ident)
        traces = [(ident, trace)] if trace is not None else []
    return [(label, trace.parent / "logs" / name)
            for label, trace in traces for name in (MEMBER_LOG, "bootstrap.log")]


class _LogTail:
    """One log file read on from where it was last read, whole lines only."""

    def __init__(self, label: str, path: Path) -> None:
        self.label = label
        self.path = path
        self._offset = 0
        self._pending = b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._pending + data
        complete, newline, self._pending = data.rpartition(b"\n")
        if not newline:
            return []
        text = complete.decode("utf-8", "replace")
        return [f"[{self.label}] {escape_control(line)}" for line in text.split("\n")]


def logs(args: argparse.Namespace) -> int:
    """``mur logs <frm_…|ses_…> [--follow]``: each session's own log (``logs/member.log``:
    warnings, errors and agents' tracebacks) and bootstrap log, each line behind its
    member's name; ``--follow`` prints new lines as they come until the formation or
    session ends (or Ctrl-C)."""
    fail = failer("logs", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return not_an_id(fail, ident)
    kind = "formation" if is_formation_id(ident) else "session"
    tails = [_LogTail(label, path) for label, path in _log_files(ident)]
    if not tails:
        return fail(f"no records of {kind} {ident} under the records of this MURMUR_HOME")
    out = sys.stdout
    while True:
        running = bool(args.follow) and is_running(ident)
        for tail in tails:
            for line in tail.lines():
                out.write(line + "\n")
        out.flush()
        if not running:
            return 0
        time.sleep(FOLLOW_POLL)
