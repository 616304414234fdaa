"""What the launcher prints about a formation: the formation line and its table.

``--json``: one JSON object on stdout (docs/launcher.md, "The formation line")::

    {"event":"formation","formation_id":"frm_…","project_dir":"/…",
     "members":[{"name","entry","pid","session_id","door_url","grpc_url","workdir"}, …]}

``grpc_url`` is the door's gRPC binding (``127.0.0.1:<port>``, docs/grpc.md), ``null``
for a door that serves none;

plus ``public_url`` and ``public_grpc_url`` (at the top and on the entry member's row)
when ``--publish`` put the entry member's door beyond loopback.

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
    rows: list[dict[str, Any]] = []
    published = published_grpc = None
    for member in sorted(members, key=lambda m: m.spec.index):
        ready = member.ready
        rows.append({
            "name": member.name,
            "entry": member.entry,
            "pid": member.process.pid,
            "session_id": ready.session_id if ready else None,
            "door_url": ready.door_url if ready else None,
            "grpc_url": ready.grpc_url if ready else None,
            "workdir": str(member.workdir),
        })
        if member.entry and ready is not None and ready.public_url is not None:
            published = rows[-1]["public_url"] = ready.public_url
            if ready.public_grpc_url is not None:
                published_grpc = rows[-1]["public_grpc_url"] = ready.public_grpc_url
    line: dict[str, Any] = {"event": "formation", "formation_id": formation_id,
                            "project_dir": str(project_dir), "members": rows}
    if published is not None:
        line["public_url"] = published
    if published_grpc is not None:
        line["public_grpc_url"] = published_grpc
    return line


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
    if line.get("public_url"):
        lines.append(f"  the entry door is published at {line['public_url']}")
    return "\n".join(lines) + "\n"
