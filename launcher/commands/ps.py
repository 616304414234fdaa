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
                                     "seal_head": record.seal_head, "members": []}
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
                "seal_head": None, "members": []})
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


def ended_formations(running: set[str]) -> list[dict[str, Any]]:
    """The formations whose directory (and ``formation.json``) is still kept and whose
    launcher no longer runs, newest first: id, when it started (from its id), project."""
    import os

    from launcher.home.formations import read_formation_marker
    from launcher.home.paths import formations_root
    from launcher.ids import is_formation_id

    try:
        names = [name for name in os.listdir(formations_root()) if is_formation_id(name)]
    except OSError:
        return []
    ended = []
    for ident in sorted(names, reverse=True):    # UUIDv7: newest first
        if ident in running:
            continue
        marker = read_formation_marker(ident)
        ended.append({"formation_id": ident, "started": _started_at(ident),
                      "project_dir": marker.project_dir if marker is not None else None})
    return ended


def _started_at(ident: str) -> str:
    """When a formation started, from its UUIDv7 id's first 48 bits (milliseconds)."""
    from datetime import UTC, datetime

    millis = int(ident[4:16], 16)
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def render_ended(ended: list[dict[str, Any]]) -> str:
    if not ended:
        return "no ended formation is kept\n"
    rows = [["ENDED FORMATION", "STARTED", "PROJECT"]]
    rows += [[f["formation_id"], f["started"], f["project_dir"] or "-"] for f in ended]
    return "\n".join(_table(rows)) + "\n"


def ps(args: argparse.Namespace) -> int:
    """``mur ps [-a] [--json]``: running formations with their members, then sessions;
    with ``-a``, the ended formations still kept too."""
    fail = failer("ps", args)
    try:
        prune_stale()
    except RunningRecordsUnreadable as exc:
        return fail(f"the running records in {exc.filename} cannot be read")
    live = live_records(fail)
    if live is None:
        return 1
    state = running_state(live)
    show_all = bool(getattr(args, "all", False))
    if show_all:
        state["ended"] = ended_formations({f["formation_id"] for f in state["formations"]})
    if args.json:
        print(json.dumps(state))
    else:
        sys.stdout.write(render_ps(state))
        if show_all:
            sys.stdout.write("\n" + render_ended(state["ended"]))
    return 0
