"""``mur trace show``: a formation's trace records merged in time order, or one
session's; ``--tree`` the call tree (launcher.commands.trace_tree), ``--follow`` the
records as they happen (launcher.commands.trace_follow)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from launcher.commands.common import failer, not_an_id
from launcher.home.running_records import is_running
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.process import escape_control

#: Fields every record has, shown in their own columns.
_COLUMNS = ("ts", "event", "member")


def _field(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = escape_control(text)
    return text if len(text) <= 120 else text[:117] + "..."


def render_record(record: dict[str, Any]) -> str:
    """One trace record for people: time, member, event, then its key fields."""
    fields = " ".join(f"{key}={_field(value)}" for key, value in record.items()
                      if key not in _COLUMNS and value is not None)
    member = str(record.get("member") or "-")
    return (f"{record.get('ts', '-')}  {escape_control(member):<12}  "
            f"{escape_control(str(record.get('event', '-'))):<18}  {fields}").rstrip()


def trace_records(ident: str) -> list[dict[str, Any]] | None:
    """The merged records of a formation or one session; None when none are found."""
    from launcher.home.trace import (
        find_formation_traces,
        find_session_trace,
        merge_traces,
        read_trace,
        session_label,
        with_delegated,
    )

    if is_formation_id(ident):
        pairs = find_formation_traces(ident)
        return merge_traces(with_delegated(pairs)) if pairs else None
    path = find_session_trace(ident)
    if path is None:
        return None
    first = next(iter(read_trace(path)), {})
    member = session_label(first) or "-"
    return merge_traces(with_delegated([(member, path)]))


def trace_show(args: argparse.Namespace) -> int:
    """``mur trace show <frm_…|ses_…> [--json] [--tree | --follow]``: records merged in
    time order, or their call tree, or (``--follow``) the live records."""
    fail = failer("trace show", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return not_an_id(fail, ident)
    kind = "formation" if is_formation_id(ident) else "session"
    try:
        records = trace_records(ident)
    except OSError as exc:
        return fail(f"the records of {kind} {ident} cannot be read "
                                   f"({exc.strerror or exc})")
    if records is None and getattr(args, "follow", False) and is_running(ident):
        records = []                      # coming up: its traces are not written yet
    if records is None:
        return fail(f"no trace of {kind} {ident} under the records of this "
                                   "MURMUR_HOME")
    out = sys.stdout
    if getattr(args, "follow", False):
        from launcher.commands.trace_follow import follow_trace

        def write(record: dict[str, Any]) -> None:
            out.write((json.dumps(record, ensure_ascii=False) if args.json
                       else render_record(record)) + "\n")
            out.flush()

        for record in records:
            write(record)
        return follow_trace(ident, records, write)
    if getattr(args, "tree", False):
        from launcher.commands.trace_tree import build_tree, render_tree, tree_json

        roots = build_tree(records)
        out.write(json.dumps([tree_json(root) for root in roots], ensure_ascii=False) + "\n"
                  if args.json else render_tree(roots, f"{kind} {ident}"))
        return 0
    for record in records:
        out.write((json.dumps(record, ensure_ascii=False) if args.json
                   else render_record(record)) + "\n")
    return 0
