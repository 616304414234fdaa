"""``mur ps``: what runs (formations with their members, sessions on their own), with
each member's live tasks read from its trace; ``--json`` for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from launcher.commands.common import failer, live_records
from launcher.commands.live_tasks import live_tasks, render_tasks
from launcher.home.running_records import RunningRecord, RunningRecordsUnreadable, prune_stale


def _session_row(record: RunningRecord, entry: str | None) -> dict[str, Any]:
    return {"session_id": record.id, "member": record.member,
            "entry": entry is not None and record.member == entry, "pid": record.pid,
            "capsule": record.capsule, "version": record.version,
            "door_url": record.door_url, "records_dir": record.records_dir,
            "started": record.started, "tasks": live_tasks(record.records_dir)}


def running_state(live: list[RunningRecord]) -> dict[str, Any]:
    """Formations (each with its members) and standalone sessions, from live records."""
    formations: dict[str, dict[str, Any]] = {}
    for record in live:
        if record.kind == "launcher":
            formations[record.id] = {"formation_id": record.id, "launcher_pid": record.pid,
                                     "project_dir": record.project_dir,
                                     "entry": record.member, "started": record.started,
                                     "members": []}
    sessions = []
    for record in sorted(live, key=lambda r: r.started):
        if record.kind != "session":
            continue
        if record.formation_id:
            formation = formations.setdefault(record.formation_id, {
                "formation_id": record.formation_id, "launcher_pid": None,
                "project_dir": None, "entry": None, "started": record.started,
                "members": []})
            formation["members"].append(_session_row(record, formation["entry"]))
        else:
            sessions.append(_session_row(record, None))
    for formation in formations.values():
        formation["members"].sort(key=lambda row: (not row["entry"], row["started"]))
    ordered = sorted(formations.values(), key=lambda f: f["formation_id"])
    return {"formations": ordered, "sessions": sessions}


def _table(rows: list[list[str]], indent: str = "") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)),
                                row[-1]]).rstrip() for row in rows]


def render_ps(state: dict[str, Any]) -> str:
    lines: list[str] = []
    for formation in state["formations"]:
        launcher = (f"launcher pid {formation['launcher_pid']}" if formation["launcher_pid"]
                    else "launcher gone")
        lines.append(f"formation {formation['formation_id']}  {launcher}  project "
                     f"{formation['project_dir'] or '-'}")
        rows = [["MEMBER", "ENTRY", "SESSION", "PID", "TASKS", "DOOR"]]
        rows += [[m["member"] or "-", "yes" if m["entry"] else "", m["session_id"],
                  str(m["pid"]), render_tasks(m["tasks"]), m["door_url"] or "-"]
                 for m in formation["members"]]
        lines += _table(rows, "  ") if len(rows) > 1 else ["  (no member running)"]
    if state["sessions"]:
        if lines:
            lines.append("")
        rows = [["SESSION", "CAPSULE", "VERSION", "PID", "TASKS", "DOOR"]]
        rows += [[s["session_id"], s["capsule"] or "-", s["version"] or "-", str(s["pid"]),
                  render_tasks(s["tasks"]), s["door_url"] or "-"] for s in state["sessions"]]
        lines += _table(rows)
    return "\n".join(lines) + "\n" if lines else "nothing is running\n"


def ps(args: argparse.Namespace) -> int:
    """``mur ps [--json]``: running formations with their members, then sessions."""
    fail = failer("ps", args)
    try:
        prune_stale()
    except RunningRecordsUnreadable as exc:
        return fail(f"the running records in {exc.filename} cannot be read")
    live = live_records(fail)
    if live is None:
        return 1
    state = running_state(live)
    if args.json:
        print(json.dumps(state))
    else:
        sys.stdout.write(render_ps(state))
    return 0
