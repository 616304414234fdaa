"""The retention pass over formation directories: ``trace.retain`` of the entry member
bounds its roster's formation directories by count and age; a directory that may still
be in use is never removed (docs/roster.md, "Removing formation directories").
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from launcher.home.formations import (
    formation_dir,
    formation_records,
    read_formation_marker,
)
from launcher.home.paths import detached_logs, formations_root
from launcher.home.running_records import RunningRecordsUnreadable, list_live
from launcher.ids import id_time, is_formation_id

RemovalReason = Literal["max_sessions", "max_age"]


@dataclass(frozen=True)
class Removal:
    formation_id: str
    reason: RemovalReason
    path: Path


def format_removal(removal: Removal) -> str:
    """The stderr line for one removal (no newline)."""
    return (f"[mur run] retention: removed formation {removal.formation_id} "
            f"({removal.reason})")


def _formation_ids_on_disk() -> list[str]:
    """Formation directories under ``formations/`` (real folders only), newest first."""
    try:
        entries = list(os.scandir(formations_root()))
    except OSError:
        return []
    ids = [entry.name for entry in entries
           if is_formation_id(entry.name) and entry.is_dir(follow_symlinks=False)]
    return sorted(ids, reverse=True)


def _running_formations() -> set[str] | None:
    """Formation ids named by a live running record; None when running/ is unreadable."""
    try:
        live = list_live()
    except RunningRecordsUnreadable:
        return None
    return {record.formation_id or record.id for record in live
            if record.formation_id or record.kind == "launcher"}


def remove_tree(path: Path) -> bool:
    """Remove a folder whole; a symlink in its place is unlinked, never followed."""
    try:
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
    except OSError:
        return False
    return True


def retention_pass(
    *,
    project_dir: str | os.PathLike[str],
    current_formation_id: str,
    max_sessions: int | None,
    max_age: timedelta | None,
    now: datetime | None = None,
) -> list[Removal]:
    """Apply the entry member's ``trace.retain`` to the project's formation directories.

    Follows docs/runtime-files.md ("Retention of formation directories"): the project's directories
    (those whose marker names ``project_dir``, plus the current one) are ranked newest
    first; one past ``max_sessions`` or older than ``max_age`` is removed whole, with
    its members' records (and its launcher's log, when it ran detached). Never removed:
    the current formation or a newer one; one whose launcher runs, or that a running
    record names while its process runs (everything, when ``running/`` cannot be read);
    one whose marker names another project, or that has no marker or an unreadable one.
    Returns the removals, newest first.
    """
    if max_sessions is None and max_age is None:
        return []
    running = _running_formations()
    if running is None:  # nothing can be shown not to run: everything counts as running
        return []
    now = now or datetime.now(UTC)
    project = os.path.realpath(project_dir)
    markers = {ident: read_formation_marker(ident) for ident in _formation_ids_on_disk()}
    ranked = [ident for ident, marker in markers.items()
              if ident == current_formation_id
              or (marker is not None and marker.project_dir == project)]
    removals = []
    for rank, ident in enumerate(ranked):
        marker = markers[ident]
        reason = over_limit(ident, rank, max_sessions, max_age, now)
        if (reason is None or marker is None or ident >= current_formation_id
                or ident in running or marker.launcher_alive()):
            continue
        path = formation_dir(ident)
        records = formation_records(ident)  # computed while the folder still resolves
        if remove_tree(path):
            remove_tree(records)
            with contextlib.suppress(OSError):  # its log when it ran with --detach
                (detached_logs() / f"{ident}.log").unlink(missing_ok=True)
            removals.append(Removal(formation_id=ident, reason=reason, path=path))
    return removals


def over_limit(ident: str, rank: int, max_sessions: int | None,
                max_age: timedelta | None, now: datetime) -> RemovalReason | None:
    """Why the id at ``rank`` (0: the newest) is past the bounds, or None: ``max_age``
    first, for one over both. Shared with the sessions' pass."""
    if max_age is not None and now - id_time(ident) > max_age:
        return "max_age"
    if max_sessions is not None and rank >= max_sessions:
        return "max_sessions"
    return None
