"""What the launcher prints about a formation: the formation line and its table.

``--json``: one JSON object on stdout (docs/launcher.md, "The formation line")::

    {"event":"formation","formation_id":"frm_…","project_dir":"/…",
     "members":[{"name","entry","pid","session_id","door_url","workdir"}, …]}

Otherwise a short table on stderr, so that with ``--task`` stdout holds the entry
member's result alone (``answer=$(mur run --roster --task …)`` works).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.formation.members import LaunchedMember


def formation_line(formation_id: str, project_dir: Path,
                   members: Sequence[LaunchedMember]) -> dict[str, Any]:
    """The formation line's object, members in roster order."""
    rows = []
    for member in sorted(members, key=lambda m: m.spec.index):
        ready = member.ready
        rows.append({
            "name": member.name,
            "entry": member.entry,
            "pid": member.process.pid,
            "session_id": ready.session_id if ready else None,
            "door_url": ready.door_url if ready else None,
            "workdir": str(member.workdir),
        })
    return {"event": "formation", "formation_id": formation_id,
            "project_dir": str(project_dir), "members": rows}


def render_table(line: dict[str, Any]) -> str:
    """The formation line for people: a heading and one row a member."""
    header = ("MEMBER", "ENTRY", "PID", "SESSION", "DOOR", "WORKDIR")
    rows = [(m["name"], "yes" if m["entry"] else "", str(m["pid"]), m["session_id"] or "-",
             m["door_url"] or "-", m["workdir"]) for m in line["members"]]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]

    def render(row: Sequence[str]) -> str:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        return "  " + "  ".join([*cells, row[-1]])

    lines = [f"formation {line['formation_id']} ({len(rows)} member"
             f"{'s' if len(rows) != 1 else ''}) in {line['project_dir']}",
             render(header), *(render(row) for row in rows)]
    return "\n".join(lines) + "\n"
