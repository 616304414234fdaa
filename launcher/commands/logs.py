"""``mur logs``: every log of a formation's sessions, or of one session, in time order,
each line behind its member's name; ``--follow`` until it ends.

In order: the sessions and their log files (launcher/home/log_lines.py says which files
and how a line gets its time), the member filter, then the lines read once, merged in
time order, cut by ``--since`` and ``--tail``, printed (text, or one JSON object a line
with ``--json``), and with ``--follow`` read on every :data:`FOLLOW_POLL` seconds until
the formation or session no longer runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from launcher.commands.common import Fail, failer, not_an_id
from launcher.durations import parse_since
from launcher.home.log_lines import LogLine, LogTail, in_time_order, session_log_files
from launcher.home.running_records import is_running
from launcher.home.trace import timestamp
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.process import escape_control

#: How often ``mur logs --follow`` looks for new lines.
FOLLOW_POLL = 0.25


def _sessions(ident: str) -> list[tuple[str, str, Path]]:
    """(label, session id, logs folder) of each session of a formation, in the order
    they started, or of one session (labelled with its id)."""
    from launcher.home.trace import find_formation_traces, find_session_trace, with_delegated

    if is_formation_id(ident):
        traces = with_delegated(find_formation_traces(ident))
    else:
        trace = find_session_trace(ident)
        traces = [(ident, trace)] if trace is not None else []
    return [(label, trace.parent.name, trace.parent / "logs") for label, trace in traces]


def _tails(ident: str, members: list[str], fail: Fail) -> list[LogTail] | int:
    sessions = _sessions(ident)
    kind = "formation" if is_formation_id(ident) else "session"
    if not sessions:
        return fail(f"no records of {kind} {ident} under the records of this MURMUR_HOME")
    if members and kind == "session":
        return fail("a session is one member's: name members after a formation id "
                    "(frm_...) only", 2)
    known = [label for label, _, _ in sessions]
    unknown = [name for name in members if name not in known]
    if unknown:
        return fail(f"formation {ident} has no member {escape_control(unknown[0][:64])!r}; "
                    f"its members: {', '.join(dict.fromkeys(known))}", 2)
    return [LogTail(path, member=label, session=session, output=output)
            for label, session, logs in sessions if not members or label in members
            for path, output in session_log_files(logs)]


def _render(line: LogLine, args: argparse.Namespace) -> str:
    if args.json:
        return json.dumps(asdict(line))
    stamp = f"{line.time} " if args.timestamps else ""
    return f"[{line.member}] {stamp}{escape_control(line.text)}"


def _print(lines: Iterable[LogLine], args: argparse.Namespace) -> None:
    out = sys.stdout
    for line in lines:
        out.write(_render(line, args) + "\n")
    out.flush()


def logs(args: argparse.Namespace) -> int:
    """``mur logs <frm_…|ses_…> [MEMBER ...] [--follow] [--since T] [--tail N]``."""
    fail = failer("logs", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return not_an_id(fail, ident)
    since = ""
    if args.since is not None:
        try:
            since = timestamp(parse_since(args.since, datetime.now(UTC)))
        except ValueError as exc:
            return fail(str(exc), 2)
    if args.tail is not None and args.tail < 0:
        return fail("--tail must be 0 or more lines", 2)
    tails = _tails(ident, list(args.members), fail)
    if isinstance(tails, int):
        return tails
    following = bool(args.follow)
    lines = [line for line in in_time_order([tail.lines() for tail in tails])
             if line.time >= since]
    _print(lines if args.tail is None else lines[max(0, len(lines) - args.tail):], args)
    running = following and is_running(ident)
    while running:  # one read more once it ended: its last lines
        time.sleep(FOLLOW_POLL)
        running = is_running(ident)
        _print(in_time_order([tail.lines() for tail in tails]), args)
    return 0
