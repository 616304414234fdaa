"""A session's records directory, and the layout of ``$MURMUR_HOME`` around it.

Layout (docs/runtime-files.md, "Paths" and "Formation directories")::

    records/<workdir>/<session-id>/        a session's records directory (this module)
        trace.jsonl  out/  home/  tmp/  logs/  operator.token (0600)
    running/<id>.json                      one per live `mur run` (running_records)
    formations/<formation-id>/             0700, made by the launcher (formations)
        formation.json                     0600 ownership marker
        <member>/                          0700, a peer's work folder, never reused

``<workdir>`` is the work folder's absolute path (symlinks resolved) without its leading
``/`` (``paths``). A peer's work folder is under ``formations/``, so its records are
under ``records/<MURMUR_HOME>/formations/<formation-id>/<member>/<session-id>/``. Files
are written whole or not at all (``files``); ``retention`` removes old formation
directories.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from launcher.home.files import write_new
from launcher.home.paths import workdir_records
from launcher.ids import is_session_id

OPERATOR_TOKEN_FILE = "operator.token"  # noqa: S105 - a file name
TRACE_FILE = "trace.jsonl"


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
    def output_log(self) -> Path:
        return self.logs / OUTPUT_LOG

    @property
    def operator_token(self) -> Path:
        return self.dir / OPERATOR_TOKEN_FILE


#: The member runtime's own log in ``logs/``: its warnings and errors, an agent's
#: exception with its traceback among them (``mur logs`` prints it).
MEMBER_LOG = "member.log"
#: What the member's own programs print (its agent, its upstream), kept line by line
#: with the time each was read (launcher/member/output_log.py).
OUTPUT_LOG = "output.log"


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
    write_new(Path(path), token.encode("utf-8"))


def read_operator_token(path: str | os.PathLike[str]) -> str:
    """The operator token in ``path`` (no trailing whitespace). Refuses a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(4096).decode("utf-8").strip()
