"""Running records: ``running/<id>.json``, one per live ``mur run`` (a session, or a
launcher named by its formation id), written when it starts and removed when it ends;
stale ones (the pid gone, or another process under it) are ignored and pruned.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from launcher.errors import LauncherError
from launcher.home.files import write_atomic
from launcher.home.paths import running_dir
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.process import pid_alive

RunningKind = Literal["session", "launcher"]


class RunningRecordsUnreadable(LauncherError, OSError):
    """``running/`` exists but cannot be listed: callers treat everything as running."""


@dataclass(frozen=True)
class RunningRecord:
    """One live ``mur run``: a member session (id ``ses_…``) or a launcher (``frm_…``)."""

    id: str
    pid: int
    start: str | None
    kind: RunningKind
    formation_id: str | None = None
    member: str | None = None
    door_url: str | None = None
    records_dir: str | None = None
    project_dir: str | None = None
    capsule: str | None = None
    version: str | None = None
    started: str = ""
    #: Where the door (a launcher's: its entry member's) is published beyond loopback.
    public_url: str | None = None
    #: A delegated child's parent session (``mur ps`` shows it under its parent).
    parent_session: str | None = None
    #: How many times the launcher started this member again (docs/restarts.md).
    restarts: int = 0
    #: A launcher's: the head of the latest seal it wrote (docs/audit.md), 64 hex digits;
    #: None before the first.
    seal_head: str | None = None

    def is_live(self) -> bool:
        """The recorded process still runs (same pid, same start time)."""
        return pid_alive(self.pid, self.start)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunningRecord:
        """Parse a record; ValueError for any missing or mistyped field."""
        ident, pid, kind = data.get("id"), data.get("pid"), data.get("kind")
        if kind == "session" and not is_session_id(ident):
            raise ValueError("a session record's id must be a session id")
        if kind == "launcher" and not is_formation_id(ident):
            raise ValueError("a launcher record's id must be a formation id")
        if kind not in ("session", "launcher") or not isinstance(ident, str):
            raise ValueError("kind must be session or launcher")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError("pid must be a positive integer")
        optional: dict[str, str | None] = {}
        for name in ("start", "formation_id", "member", "door_url", "records_dir",
                     "project_dir", "capsule", "version", "public_url", "parent_session",
                     "seal_head"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string")
            optional[name] = value or None
        started = data.get("started", "")
        if not isinstance(started, str):
            raise ValueError("started must be a string")
        restarts = data.get("restarts", 0)
        if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
            raise ValueError("restarts must be a whole number")
        return cls(id=ident, pid=pid, kind=kind, started=started, restarts=restarts,
                   **optional)


def now_iso() -> str:
    """The current UTC time as ISO-8601 with microseconds and a ``Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record_path(ident: str) -> Path:
    if not (is_session_id(ident) or is_formation_id(ident)):
        raise ValueError("a running record is named by a session or formation id")
    return running_dir() / f"{ident}.json"


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``path`` whole or not at all: a reader never sees half a record."""
    write_atomic(path, json.dumps(data, separators=(",", ":")).encode("utf-8") + b"\n")


def write_running(record: RunningRecord) -> Path:
    """Write (or replace) ``running/<id>.json`` atomically, at mode 0600."""
    path = _record_path(record.id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_json_atomic(path, record.to_json())
    return path


def remove_running(ident: str) -> None:
    """Remove ``running/<id>.json``; nothing when it is already gone."""
    with contextlib.suppress(FileNotFoundError):
        _record_path(ident).unlink()


def _running_files() -> Iterator[tuple[str, Path]]:
    """(id, path) of every record file. Raises RunningRecordsUnreadable when the folder
    exists and cannot be listed."""
    folder = running_dir()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunningRecordsUnreadable(exc.errno, "running records cannot be read",
                                       str(folder)) from None
    for name in sorted(names):
        ident = name.removesuffix(".json")
        if name.endswith(".json") and (is_session_id(ident) or is_formation_id(ident)):
            yield ident, folder / name


def _load_record(ident: str, path: Path) -> RunningRecord | None:
    try:
        data = json.loads(path.read_bytes())
        record = RunningRecord.from_json(data) if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    return record if record is not None and record.id == ident else None


def list_running() -> list[RunningRecord]:
    """Every parseable record, live or stale. Raises RunningRecordsUnreadable."""
    records = (_load_record(ident, path) for ident, path in _running_files())
    return [record for record in records if record is not None]


def list_live() -> list[RunningRecord]:
    """The records whose process still runs. Raises RunningRecordsUnreadable."""
    return [record for record in list_running() if record.is_live()]


def prune_stale() -> list[str]:
    """Remove every record whose process is gone or whose pid now belongs to another
    process, and every record file that does not parse; the ids removed. Raises
    RunningRecordsUnreadable."""
    removed = []
    for ident, path in _running_files():
        record = _load_record(ident, path)
        if record is None or not record.is_live():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(ident)
    return removed


def read_running(ident: str) -> RunningRecord | None:
    """The record named ``ident`` when it exists and parses (live or not)."""
    return _load_record(ident, _record_path(ident))


def is_running(ident: str) -> bool:
    """True when ``running/<id>.json`` names a process that still runs."""
    record = read_running(ident)
    return record is not None and record.is_live()
