"""The retention pass over a capsule's own sessions: ``trace.retain`` bounds the sessions
of a capsule in the records directory it runs in, as it bounds an entry member's
formation directories (:mod:`launcher.home.retention`; docs/runtime-files.md,
"Retention of sessions").

In this order, at the end of every session whose capsule sets ``trace.retain``:

1. the sessions of the same capsule in the same ``records/<workdir>/`` folder (those whose
   ``session_start`` names the capsule; the current one included), newest first by the
   time in their ``ses_`` ids;
2. one past ``max_sessions``, or older than ``max_age``, is removed whole (the reason is
   ``max_age`` for one over both);
3. never removed: the current session or a newer one; one whose running record names a
   process that still runs (every session, when ``running/`` cannot be read); one whose
   trace has no readable ``session_start`` (nothing says whose it is); a symlink is
   unlinked, never followed.

Each removal is one stderr line, newest first, in the formation line's style:
``[mur run] retention: removed session ses_... (max_sessions)``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from launcher.home.retention import RemovalReason, over_limit, remove_tree
from launcher.home.running_records import RunningRecordsUnreadable, list_live
from launcher.ids import is_session_id

__all__ = ["SessionRemoval", "format_session_removal", "session_retention_pass"]

#: The longest first line read to learn whose a session is (a session_start is small).
_FIRST_LINE_LIMIT = 1 << 16


@dataclass(frozen=True)
class SessionRemoval:
    session_id: str
    reason: RemovalReason
    path: Path


def format_session_removal(removal: SessionRemoval) -> str:
    """The stderr line for one removal (no newline)."""
    return (f"[mur run] retention: removed session {removal.session_id} "
            f"({removal.reason})")


def session_retention_pass(
    *,
    sessions_dir: Path,
    capsule: str,
    current_session_id: str,
    max_sessions: int | None,
    max_age: timedelta | None,
    now: datetime | None = None,
) -> list[SessionRemoval]:
    """Apply a capsule's ``trace.retain`` to its sessions in ``sessions_dir`` (the
    ``records/<workdir>/`` folder the current session's records directory is in).
    Returns the removals, newest first (see the module text for what is never removed)."""
    if max_sessions is None and max_age is None:
        return []
    try:
        running = {record.id for record in list_live()}
    except RunningRecordsUnreadable:
        return []  # nothing can be shown not to run: everything counts as running
    now = now or datetime.now(UTC)
    ranked = [ident for ident in _session_ids_on_disk(sessions_dir)
              if ident == current_session_id
              or _capsule_of(sessions_dir / ident) == capsule]
    removals = []
    for rank, ident in enumerate(ranked):
        reason = over_limit(ident, rank, max_sessions, max_age, now)
        if reason is None or ident >= current_session_id or ident in running:
            continue
        path = sessions_dir / ident
        if remove_tree(path):
            removals.append(SessionRemoval(session_id=ident, reason=reason, path=path))
    return removals


def _session_ids_on_disk(sessions_dir: Path) -> list[str]:
    """Session records directories in ``sessions_dir`` (real folders only), newest first."""
    try:
        entries = list(os.scandir(sessions_dir))
    except OSError:
        return []
    ids = [entry.name for entry in entries
           if is_session_id(entry.name) and entry.is_dir(follow_symlinks=False)]
    return sorted(ids, reverse=True)


def _capsule_of(records_dir: Path) -> str | None:
    """The capsule a session's ``session_start`` (its trace's first record) names."""
    try:
        with open(records_dir / "trace.jsonl", "rb") as trace:
            record = json.loads(trace.readline(_FIRST_LINE_LIMIT))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("event") != "session_start":
        return None
    capsule = record.get("capsule")
    return capsule if isinstance(capsule, str) else None
