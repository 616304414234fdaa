"""``mur stop``: SIGTERM to a formation's launcher (and the members started by hand
with its id) or to one session, then wait until each is gone."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from launcher.commands.common import failer, live_records, not_an_id
from launcher.home.running_records import RunningRecord
from launcher.ids import is_formation_id, is_session_id

#: How long ``mur stop`` waits for what it stopped to be gone: a launcher may take the
#: 25 s grace it gives members, plus its own teardown.
STOP_WAIT = 40.0


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (field 4 of /proc/<pid>/stat), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        return int(data[data.rfind(b")") + 1:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _signal(record: RunningRecord) -> bool:
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(records: Iterable[RunningRecord], timeout: float) -> list[RunningRecord]:
    """The records whose process still runs after ``timeout`` seconds."""
    waiting = list(records)
    end = time.monotonic() + timeout
    while waiting and time.monotonic() < end:
        waiting = [record for record in waiting if record.is_live()]
        if waiting:
            time.sleep(0.1)
    return [record for record in waiting if record.is_live()]


def _project_formation(project: Path, live: list[RunningRecord]) -> tuple[str | None, str]:
    """The one formation running in ``project``; else None and what to say."""
    here = os.path.realpath(project)
    running = sorted(record.id for record in live if record.kind == "launcher"
                     and record.project_dir is not None
                     and os.path.realpath(record.project_dir) == here)
    if len(running) == 1:
        return running[0], ""
    if not running:
        return None, (f"no formation runs in {here}; `mur ps` lists what runs (name it: "
                      "`mur stop frm_...`)")
    return None, (f"{len(running)} formations run in {here} ({', '.join(running)}); name "
                  "the one to stop (a unique prefix will do)")


def stop(args: argparse.Namespace) -> int:
    """``mur stop <frm_…|ses_…>``: SIGTERM to a formation's launcher (which ends every
    member), or to one session; waits until it is gone."""
    fail = failer("stop", args)
    live = live_records(fail)
    if live is None:
        return 1
    ident: str | None = args.id
    if ident is None:
        ident, problem = _project_formation(args.project, live)
        if ident is None:
            return fail(problem)
    if not (is_formation_id(ident) or is_session_id(ident)):
        return not_an_id(fail, ident)
    if is_formation_id(ident):
        targets = _formation_targets(ident, live)
        kind = "formation"
    else:
        targets = [record for record in live if record.id == ident]
        kind = "session"
    if not targets:
        return fail(f"{kind} {ident} is not running")
    try:
        signalled = [record for record in targets if _signal(record)]
    except PermissionError:
        return fail(f"{kind} {ident} belongs to another user; it was not stopped")
    left = _wait_gone(signalled, STOP_WAIT)
    if args.json:  # one object either way: "stopped" says which
        print(json.dumps({"id": ident, "kind": kind, "stopped": not left,
                          "signalled": [record.pid for record in signalled]}))
        return 1 if left else 0
    if left:
        return fail(f"{kind} {ident} was sent SIGTERM but still runs after "
                    f"{STOP_WAIT:g} seconds (pid {', '.join(str(r.pid) for r in left)})")
    print(f"stopped {kind} {ident}")
    return 0


def _started_by(pid: int, launcher_pid: int) -> bool:
    """Whether the launcher started ``pid``: its child, or a child of its member
    template (docs/launcher.md, "Starting members")."""
    parent = parent_pid(pid)
    return parent == launcher_pid or (parent is not None and
                                      parent_pid(parent) == launcher_pid)


def _formation_targets(formation_id: str, live: list[RunningRecord]) -> list[RunningRecord]:
    """The launcher, and every session of the formation the launcher did not start (a
    member started by hand, which no lifeline winds down). The launcher's own members
    are never signalled: it ends them by closing their lifelines."""
    launcher = next((record for record in live
                     if record.kind == "launcher" and record.id == formation_id), None)
    targets = [launcher] if launcher is not None else []
    for record in live:
        if record.kind != "session" or record.formation_id != formation_id:
            continue
        if launcher is not None and _started_by(record.pid, launcher.pid):
            continue
        targets.append(record)
    return targets
