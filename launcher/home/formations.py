"""Formation directories: ``formations/<formation-id>/`` (0700, made by the launcher),
its ``formation.json`` ownership marker (0600) and each peer's work folder in it (0700,
never reused) (docs/runtime-files.md, "Formation directories").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.protocol import MEMBER_NAME_RE
from launcher.errors import LauncherError
from launcher.home.files import write_new
from launcher.home.paths import formations_root, workdir_records
from launcher.ids import is_formation_id
from launcher.spawn.process import pid_alive

MARKER_FILE = "formation.json"


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
    #: A version 2 roster's bounds as admitted (``FormationBounds.to_json``), for
    #: ``mur graph``'s labels; ``None`` for a version 1 roster.
    bounds: dict[str, Any] | None = None
    #: The formation key's raw Ed25519 public key: what its seals and its members'
    #: cards are verified with (docs/audit.md); ``None`` in a marker without it.
    public_key: bytes | None = None

    def launcher_alive(self) -> bool:
        return pid_alive(self.launcher_pid, self.launcher_start or None)


def write_formation_marker(formation_id: str, *, project_dir: str | os.PathLike[str],
                           launcher_pid: int, launcher_start: str | None,
                           edges: Iterable[tuple[str, str]] = (),
                           bounds: dict[str, Any] | None = None,
                           public_key: bytes | None = None) -> Path:
    """Write ``formation.json`` (mode 0600, created, never replaced). Call it before the
    first peer directory. ``edges`` are the admitted roster's, which ``mur audit`` checks
    the traces against. On OSError the launcher launches anyway and prints
    :func:`format_no_marker_warning`."""
    path = formation_dir(formation_id) / MARKER_FILE
    data = {"project_dir": os.path.realpath(project_dir), "launcher_pid": launcher_pid,
            "launcher_start": launcher_start or "",
            "edges": [{"from": caller, "to": callee} for caller, callee in edges]}
    if bounds:
        data["bounds"] = bounds
    if public_key is not None:
        from gateway.auth.tokens import b64url_encode

        data["public_key"] = b64url_encode(public_key)
    write_new(path, json.dumps(data, indent=2).encode("utf-8") + b"\n")
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
    bounds = data.get("bounds")
    return FormationMarker(project_dir=project, launcher_pid=pid, launcher_start=start,
                           edges=_marker_edges(data.get("edges")),
                           bounds=bounds if isinstance(bounds, dict) else None,
                           public_key=_public_key(data.get("public_key")))


def _public_key(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    from gateway.auth.tokens import b64url_decode_canonical

    try:
        raw = b64url_decode_canonical(value)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None


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
