"""Files under ``$MURMUR_HOME``: session records, running records, formation directories,
and the retention pass over formation directories.

Layout (docs/runtime-files.md, "Paths" and "Formation directories")::

    records/<workdir>/<session-id>/        a session's records directory
        trace.jsonl  out/  home/  tmp/  logs/  operator.token (0600)
    running/<id>.json                      one per live `mur run` (session or launcher)
    formations/<formation-id>/             0700, made by the launcher
        formation.json                     0600 ownership marker
        <member>/                          0700, a peer's work folder, never reused

``<workdir>`` is the work folder's absolute path (symlinks resolved) without its leading
``/``. A peer's work folder is under ``formations/``, so its records are under
``records/<MURMUR_HOME>/formations/<formation-id>/<member>/<session-id>/``.

Writing (docs/runtime-files.md, "Writing files"): a file that is replaced is written
whole or not at all (:func:`write_atomic`: a temporary file beside it, then a rename); a
file that is created once is removed again when its write fails. Either way a failure
leaves no debris, and the OSError raised names the file (a failed ``os.write`` names
none); :func:`write_problem` says in words what went wrong ("no space left on the
device (disk full)").
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from gateway.protocol import MEMBER_NAME_RE
from launcher.errors import LauncherError
from launcher.home.paths import murmur_home
from launcher.ids import id_time, is_formation_id, is_session_id
from launcher.spawn.process import pid_alive

OPERATOR_TOKEN_FILE = "operator.token"  # noqa: S105 - a file name
TRACE_FILE = "trace.jsonl"
MARKER_FILE = "formation.json"

# --------------------------------------------------------------------------- paths


def home() -> Path:
    """``$MURMUR_HOME`` (``~/.murmur`` when unset) as an absolute path."""
    return Path(os.path.abspath(murmur_home()))


def records_root() -> Path:
    return home() / "records"


def running_dir() -> Path:
    return home() / "running"


def formations_root() -> Path:
    return home() / "formations"


def path_key(path: str | os.PathLike[str]) -> str:
    """An absolute path, symlinks resolved, without its leading ``/``: how a work folder
    or project appears inside ``records/``. ``/`` itself gives ``""``."""
    return os.path.realpath(path).lstrip("/")


def workdir_records(workdir: str | os.PathLike[str]) -> Path:
    """``records/<workdir>/``: where every session run in ``workdir`` keeps its records."""
    key = path_key(workdir)
    return records_root() / key if key else records_root()


# --------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class SessionRecords:
    """The paths of one session's records directory."""

    session_id: str
    workdir: Path
    dir: Path

    @property
    def trace(self) -> Path:
        return self.dir / TRACE_FILE

    @property
    def out(self) -> Path:
        return self.dir / "out"

    @property
    def result(self) -> Path:
        return self.out / "result.txt"

    @property
    def home(self) -> Path:
        return self.dir / "home"

    @property
    def tmp(self) -> Path:
        return self.dir / "tmp"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def bootstrap_log(self) -> Path:
        return self.logs / "bootstrap.log"

    @property
    def member_log(self) -> Path:
        return self.logs / MEMBER_LOG

    @property
    def operator_token(self) -> Path:
        return self.dir / OPERATOR_TOKEN_FILE


#: The member runtime's own log in ``logs/``: its warnings and errors, an agent's
#: exception with its traceback among them (``mur logs`` prints it).
MEMBER_LOG = "member.log"


def session_records(workdir: str | os.PathLike[str], session_id: str) -> SessionRecords:
    """The records paths of ``session_id`` run in ``workdir``; creates nothing."""
    if not is_session_id(session_id):
        raise ValueError("session id must be ses_ followed by 32 lowercase hex digits")
    return SessionRecords(
        session_id=session_id,
        workdir=Path(os.path.realpath(workdir)),
        dir=workdir_records(workdir) / session_id,
    )


def stage_session(
    workdir: str | os.PathLike[str], session_id: str, *, resume: bool = False
) -> SessionRecords:
    """Make a session's records directory with ``out/``, ``home/``, ``tmp/``, ``logs/``.

    The session folder and its subfolders are owner-only (0700). A new session's folder
    must not exist yet (FileExistsError); ``resume=True`` reuses an existing one.
    """
    records = session_records(workdir, session_id)
    records.dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.mkdir(records.dir, 0o700)
    except FileExistsError:
        if not resume or records.dir.is_symlink() or not records.dir.is_dir():
            raise
    for sub in (records.out, records.home, records.tmp, records.logs):
        with contextlib.suppress(FileExistsError):
            os.mkdir(sub, 0o700)
    return records


def write_operator_token(path: str | os.PathLike[str], token: str, *,
                         replace: bool = False) -> None:
    """Write the session's operator token: a new file at mode 0600, never through a
    symlink. ``replace=True`` (a resumed session) removes an existing file first. A
    write that fails removes the file (no part of a token is left behind)."""
    if replace:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    _write_new(Path(path), token.encode("utf-8"))


def read_operator_token(path: str | os.PathLike[str]) -> str:
    """The operator token in ``path`` (no trailing whitespace). Refuses a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(4096).decode("utf-8").strip()


# --------------------------------------------------------------------------- writing

#: The errors that mean the disk (or this user's share of it) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` whole or not at all: written to a temporary file in
    the same folder (never through a symlink), then renamed over ``path``. Not fsynced: a
    crash of the machine may lose the newest write, never leave half of it. On any
    failure the temporary file is removed and the OSError names ``path``."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW
                     | os.O_CLOEXEC, mode)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise _naming(exc, path) from None


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist, never through a symlink) at mode 0600 and
    write ``data``; a failed write removes the file again."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask left
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise _naming(exc, path) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` again, naming ``path`` (the file the caller meant, not its temporary)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def write_problem(exc: OSError) -> str:
    """What went wrong writing a file, in words: disk full and quota said as such."""
    if exc.errno == errno.ENOSPC:
        return "no space left on the device (disk full)"
    if exc.errno == errno.EDQUOT:
        return "the disk quota is exceeded (disk full for this user)"
    return exc.strerror or type(exc).__name__


# --------------------------------------------------------------------------- running records

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
                     "project_dir", "capsule", "version", "public_url"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string")
            optional[name] = value or None
        started = data.get("started", "")
        if not isinstance(started, str):
            raise ValueError("started must be a string")
        return cls(id=ident, pid=pid, kind=kind, started=started, **optional)


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


# --------------------------------------------------------------------------- formations


def formation_dir(formation_id: str) -> Path:
    if not is_formation_id(formation_id):
        raise ValueError("formation id must be frm_ followed by 32 lowercase hex digits")
    return formations_root() / formation_id


def peer_workdir(formation_id: str, member: str) -> Path:
    if MEMBER_NAME_RE.fullmatch(member) is None:
        raise ValueError(f"member name must match {MEMBER_NAME_RE.pattern}")
    return formation_dir(formation_id) / member


def formation_records(formation_id: str) -> Path:
    """``records/<MURMUR_HOME>/formations/<formation-id>/``: every peer's records."""
    return workdir_records(formation_dir(formation_id))


def _make_owner_only_dir(path: Path, *, exist_ok: bool) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not exist_ok or path.is_symlink() or not path.is_dir():
            raise
    os.chmod(path, 0o700, follow_symlinks=False)


def make_formation_dir(formation_id: str) -> Path:
    """Make ``formations/`` and ``formations/<formation-id>/``, both owner-only (0700).
    A formation id is fresh, so its folder must not exist yet (FileExistsError)."""
    path = formation_dir(formation_id)
    path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _make_owner_only_dir(path.parent, exist_ok=True)
    _make_owner_only_dir(path, exist_ok=False)
    return path


@dataclass(frozen=True)
class FormationMarker:
    """``formation.json``: which project and launcher own a formation directory."""

    project_dir: str
    launcher_pid: int
    launcher_start: str  # "" when it could not be read
    #: The roster edges admitted at launch, (caller, callee) in roster order; ``None``
    #: when the marker holds none (written before ``mur audit`` existed, or damaged).
    edges: tuple[tuple[str, str], ...] | None = None

    def launcher_alive(self) -> bool:
        return pid_alive(self.launcher_pid, self.launcher_start or None)


def write_formation_marker(formation_id: str, *, project_dir: str | os.PathLike[str],
                           launcher_pid: int, launcher_start: str | None,
                           edges: Iterable[tuple[str, str]] = ()) -> Path:
    """Write ``formation.json`` (mode 0600, created, never replaced). Call it before the
    first peer directory. ``edges`` are the admitted roster's, which ``mur audit`` checks
    the traces against. On OSError the launcher launches anyway and prints
    :func:`format_no_marker_warning`."""
    path = formation_dir(formation_id) / MARKER_FILE
    data = {"project_dir": os.path.realpath(project_dir), "launcher_pid": launcher_pid,
            "launcher_start": launcher_start or "",
            "edges": [{"from": caller, "to": callee} for caller, callee in edges]}
    _write_new(path, json.dumps(data, indent=2).encode("utf-8") + b"\n")
    return path


def read_formation_marker(formation_id: str) -> FormationMarker | None:
    """The marker of a formation directory; None when it is missing or does not parse."""
    path = formation_dir(formation_id) / MARKER_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            data = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    project, pid, start = (data.get("project_dir"), data.get("launcher_pid"),
                           data.get("launcher_start"))
    if not isinstance(project, str) or not project.startswith("/"):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(start, str):
        return None
    return FormationMarker(project_dir=project, launcher_pid=pid, launcher_start=start,
                           edges=_marker_edges(data.get("edges")))


def _marker_edges(value: Any) -> tuple[tuple[str, str], ...] | None:
    """``[{"from": caller, "to": callee}, ...]`` as pairs; ``None`` unless every entry is
    exactly that."""
    if not isinstance(value, list):
        return None
    edges = []
    for entry in value:
        if not (isinstance(entry, dict) and set(entry) == {"from", "to"}
                and isinstance(entry["from"], str) and isinstance(entry["to"], str)):
            return None
        edges.append((entry["from"], entry["to"]))
    return tuple(edges)


def format_no_marker_warning(reason: str) -> str:
    """The launcher's line when ``formation.json`` could not be written."""
    return (f"[mur run] warning: formation has no ownership marker ({reason}); "
            "its directory will never be removed automatically")


class PeerDirectoryExists(LauncherError, FileExistsError):
    """A peer's work folder is already there. The launcher refuses with E-RUN-045."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"the peer directory {path} already exists; a formation "
                         "never reuses a directory")
        self.path = path


def make_peer_dir(formation_id: str, member: str) -> Path:
    """Make ``formations/<formation-id>/<member>/`` at mode 0700. Anything already at
    that path (a folder, a file, a symlink) raises :class:`PeerDirectoryExists`."""
    path = peer_workdir(formation_id, member)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise PeerDirectoryExists(path) from None
    os.chmod(path, 0o700)
    return path


# --------------------------------------------------------------------------- retention

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


def _remove_tree(path: Path) -> bool:
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
    its members' records. Never removed: the current formation or a newer one; one whose
    launcher runs, or that a running record names while its process runs (everything,
    when ``running/`` cannot be read); one whose marker names another project, or that
    has no marker or an unreadable one. Returns the removals, newest first.
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
        reason = _over_limit(ident, rank, max_sessions, max_age, now)
        if (reason is None or marker is None or ident >= current_formation_id
                or ident in running or marker.launcher_alive()):
            continue
        path = formation_dir(ident)
        records = formation_records(ident)  # computed while the folder still resolves
        if _remove_tree(path):
            _remove_tree(records)
            removals.append(Removal(formation_id=ident, reason=reason, path=path))
    return removals


def _over_limit(ident: str, rank: int, max_sessions: int | None,
                max_age: timedelta | None, now: datetime) -> RemovalReason | None:
    if max_age is not None and now - id_time(ident) > max_age:
        return "max_age"
    if max_sessions is not None and rank >= max_sessions:
        return "max_sessions"
    return None
