"""``mur ps``: what runs (formations with their members, sessions on their own, each
delegated child under the session that delegated to it), with each member's live tasks
read from its trace; ``--json`` for scripts."""

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
            "started": record.started, "tasks": live_tasks(record.records_dir),
            "parent_session": record.parent_session, "restarts": record.restarts,
            "children": []}


def running_state(live: list[RunningRecord]) -> dict[str, Any]:
    """Formations (each with its members) and standalone sessions, from live records; a
    delegated child is shown under its parent's row (``children``) while its parent
    runs, else where its own record places it."""
    formations: dict[str, dict[str, Any]] = {}
    for record in live:
        if record.kind == "launcher":
            formations[record.id] = {"formation_id": record.id, "launcher_pid": record.pid,
                                     "project_dir": record.project_dir,
                                     "entry": record.member, "started": record.started,
                                     "members": []}
    sessions = sorted((r for r in live if r.kind == "session"), key=lambda r: r.started)
    rows = {record.id: _session_row(record, formations.get(record.formation_id or "", {})
                                    .get("entry")) for record in sessions}
    standalone = []
    for record in sessions:
        row = rows[record.id]
        parent = rows.get(record.parent_session or "")
        if parent is not None:
            parent["children"].append(row)
        elif record.formation_id:
            formation = formations.setdefault(record.formation_id, {
                "formation_id": record.formation_id, "launcher_pid": None,
                "project_dir": None, "entry": None, "started": record.started,
                "members": []})
            formation["members"].append(row)
        else:
            standalone.append(row)
    for formation in formations.values():
        formation["members"].sort(key=lambda row: (not row["entry"], row["started"]))
    ordered = sorted(formations.values(), key=lambda f: f["formation_id"])
    return {"formations": ordered, "sessions": standalone}


def _with_children(rows: list[dict[str, Any]], depth: int = 0
                   ) -> list[tuple[int, dict[str, Any]]]:
    """Each row, then its children (depth one deeper), in order."""
    ordered: list[tuple[int, dict[str, Any]]] = []
    for row in rows:
        ordered.append((depth, row))
        ordered += _with_children(row["children"], depth + 1)
    return ordered


def _child_label(depth: int, text: str) -> str:
    return f"{'  ' * (depth - 1)}└ {text}" if depth else text


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
        rows = [["MEMBER", "ENTRY", "SESSION", "PID", "RESTARTS", "TASKS", "DOOR"]]
        rows += [[_child_label(depth, m["member"] or f"child:{_name(m['capsule'])}"
                               if depth else m["member"] or "-"),
                  "yes" if m["entry"] else "", m["session_id"],
                  str(m["pid"]), str(m["restarts"]), render_tasks(m["tasks"]),
                  m["door_url"] or "-"]
                 for depth, m in _with_children(formation["members"])]
        lines += _table(rows, "  ") if len(rows) > 1 else ["  (no member running)"]
    if state["sessions"]:
        if lines:
            lines.append("")
        rows = [["SESSION", "CAPSULE", "VERSION", "PID", "TASKS", "DOOR"]]
        rows += [[_child_label(depth, s["session_id"]), s["capsule"] or "-",
                  s["version"] or "-", str(s["pid"]), render_tasks(s["tasks"]),
                  s["door_url"] or "-"] for depth, s in _with_children(state["sessions"])]
        lines += _table(rows)
    return "\n".join(lines) + "\n" if lines else "nothing is running\n"


def _name(capsule: str | None) -> str:
    return (capsule or "-").rsplit("/", 1)[-1]


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
