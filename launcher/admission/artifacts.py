"""A capsule artifact: the ``<name>-<version>.mur.zip`` that ``mur pack`` writes and every
store holds (docs/admission.md).

An artifact is a capsule's source directory packed into a zip. Packing is reproducible
(sorted entries, fixed timestamps, fixed permissions), so the same source always gives
the same sha256, and an installed capsule is bound to that hash. Reading and unpacking
check every entry before anything is written: no absolute path, no ``..``, no symbolic
link, no special file, no zip bomb.

In order: the bounds, the names (a capsule reference, an artifact's file name, its
sha256), writing a file whole, packing (``E-REG-007``), reading an artifact's manifest
(``E-REG-003``, ``E-MAN-*``), then extracting its entries. Where artifacts live is
``store.py``'s.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from launcher.admission.manifest import Manifest, check_files, load_manifest, parse_manifest
from launcher.admission.manifest_fields import name_problem, version_problem
from launcher.diagnostics import DiagnosticError

ARTIFACT_SUFFIX = ".mur.zip"
MANIFEST_FILE = "murmur.yaml"
#: Larger artifacts are refused when packed, installed or read.
MAX_ARTIFACT_BYTES = 256 * 1024 * 1024
#: An artifact may not unpack to more than this (zip bombs).
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_ENTRIES = 20_000
#: Never packed, at any depth: murmur's own state, bytecode caches, version control.
EXCLUDED_DIRECTORIES = frozenset({".murmur", "__pycache__", ".git"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ARTIFACT_SUFFIX)
#: Every entry's timestamp: the earliest a zip can hold, so that packing is reproducible.
FIXED_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o644
_EXECUTABLE_MODE = 0o755


@dataclass(frozen=True, slots=True)
class PackedArtifact:
    path: Path
    sha256: str
    manifest: Manifest


# --- Names -------------------------------------------------------------------------------

def capsule_problem(capsule: str) -> str | None:
    """Why ``capsule`` is not ``<scope>/<name>``, or ``None``. A bare name says so."""
    if "/" not in capsule:
        return f"`{capsule}` is a bare name, with no scope"
    scope, _, name = capsule.partition("/")
    for part, what in ((scope, "scope"), (name, "name")):
        problem = name_problem(part)
        if problem is not None:
            return f"its {what} {problem}"
    return None


def split_capsule(capsule: str, version: str) -> tuple[str, str]:
    """``(scope, name)`` of a valid reference; ``E-REG-008`` otherwise."""
    problem = capsule_problem(capsule) or version_problem(version)
    if problem is not None:
        raise DiagnosticError("E-REG-008", capsule, capsule=capsule, version=version,
                              problem=problem)
    scope, _, name = capsule.partition("/")
    return scope, name


def artifact_name(name: str, version: str) -> str:
    return f"{name}-{version}{ARTIFACT_SUFFIX}"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- Writing files -----------------------------------------------------------------------

def write_atomically(path: Path, data: bytes, mode: int = _FILE_MODE) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# --- Packing -----------------------------------------------------------------------------

def _pack_refusal(source: Path, problem: str, fix: str) -> DiagnosticError:
    return DiagnosticError("E-REG-007", str(source), source=str(source), problem=problem,
                           fix=fix)


def _entry_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an archive entry that unpacks safely, or ``None``."""
    if not name or "\x00" in name or "\\" in name:
        return "holds a NUL or a backslash, or is empty"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "is an absolute path"
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, `.` or `..` part"
    return None


def source_files(source_dir: Path) -> list[tuple[str, Path]]:
    """The files ``mur pack`` packs from ``source_dir``, as sorted ``(entry name, path)``.

    Refuses (``E-REG-007``) symbolic links, special files and names an archive cannot
    carry safely, rather than silently leaving them out.
    """
    found: list[tuple[str, Path]] = []

    def refuse_unreadable(error: OSError) -> None:
        raise _pack_refusal(source_dir, f"cannot read {error.filename} ({error.strerror})",
                            "make every file in the capsule readable")

    for directory, subdirectories, files in os.walk(source_dir, onerror=refuse_unreadable):
        subdirectories[:] = sorted(d for d in subdirectories if d not in EXCLUDED_DIRECTORIES)
        base = Path(directory)
        for entry in [*subdirectories, *files]:
            path = base / entry
            relative = path.relative_to(source_dir).as_posix()
            if path.is_symlink():
                raise _pack_refusal(source_dir, f"`{relative}` is a symbolic link",
                                    "replace the link by the file it points to")
            try:
                relative.encode("utf-8")
            except UnicodeEncodeError:
                raise _pack_refusal(source_dir, f"a file name in `{base}` is not UTF-8",
                                    "rename the file") from None
            problem = _entry_name_problem(relative)
            if problem is not None:
                raise _pack_refusal(source_dir, f"the name `{relative}` {problem}",
                                    "rename the file")
        for entry in files:
            path = base / entry
            relative = path.relative_to(source_dir).as_posix()
            if entry.endswith(EXCLUDED_SUFFIXES):
                continue
            if not stat.S_ISREG(path.lstat().st_mode):
                raise _pack_refusal(source_dir, f"`{relative}` is not a regular file",
                                    "remove sockets, pipes and devices from the capsule")
            found.append((relative, path))
    return sorted(found)


def _zip_entry(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_DATE_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix, so that the mode below is read
    info.external_attr = (stat.S_IFREG | (_EXECUTABLE_MODE if executable else _FILE_MODE)) << 16
    return info


def pack_bytes(source_dir: Path) -> tuple[bytes, Manifest]:
    """The artifact of ``source_dir`` and its manifest, validated (``E-MAN-*``,
    ``E-REG-007``); the same source gives the same bytes."""
    source_dir = Path(source_dir)
    if not source_dir.is_dir():
        raise _pack_refusal(source_dir, "is not a directory",
                            "give the capsule's source directory, the one holding murmur.yaml")
    manifest_path = source_dir / MANIFEST_FILE
    manifest = load_manifest(manifest_path)
    files = source_files(source_dir)
    check_files(manifest, {name for name, _ in files}, str(manifest_path))
    total = 0
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, path in files:
            try:
                data = path.read_bytes()
                executable = bool(path.stat().st_mode & 0o111)
            except OSError as exc:
                raise _pack_refusal(source_dir, f"cannot read `{name}` ({exc.strerror})",
                                    "make every file in the capsule readable") from None
            total += len(data)
            if total > MAX_ARTIFACT_BYTES:
                raise _pack_refusal(source_dir, f"holds more than "
                                    f"{MAX_ARTIFACT_BYTES // 2**20} MiB",
                                    "leave data the agent does not need out of the capsule")
            archive.writestr(_zip_entry(name, executable), data)
    return buffer.getvalue(), manifest


def pack(source_dir: Path, output: Path | None = None) -> PackedArtifact:
    """Pack ``source_dir`` into ``output`` (default ``./<name>-<version>.mur.zip``)."""
    data, manifest = pack_bytes(source_dir)
    target = Path(output) if output is not None else Path.cwd() / artifact_name(
        manifest.name, manifest.version)
    try:
        write_atomically(target, data)
    except OSError as exc:
        raise _pack_refusal(Path(source_dir), f"cannot write {target} ({exc.strerror})",
                            "choose a writable place with `-o FILE`") from None
    return PackedArtifact(path=target, sha256=sha256_of(data), manifest=manifest)


# --- Reading artifacts -------------------------------------------------------------------

def artifact_refusal(label: str, problem: str, fix: str) -> DiagnosticError:
    return DiagnosticError("E-REG-003", label, file=label, problem=problem, fix=fix)


#: The fix of an artifact that does not read.
REPACK = "pack the capsule again with `mur pack`"


def _checked_entries(archive: zipfile.ZipFile, label: str) -> list[zipfile.ZipInfo]:
    """Every entry of ``archive``, refusing any that would not unpack safely."""
    entries = archive.infolist()
    if len(entries) > MAX_ENTRIES:
        raise artifact_refusal(label, f"holds more than {MAX_ENTRIES} entries", REPACK)
    seen: set[str] = set()
    total = 0
    for info in entries:
        problem = _entry_name_problem(info.filename)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if problem is None and kind == stat.S_IFLNK:
            problem = "is a symbolic link"
        elif problem is None and kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            problem = "is not a regular file"
        elif problem is None and info.flag_bits & 0x1:
            problem = "is encrypted"
        elif problem is None and info.filename.rstrip("/") in seen:
            problem = "appears twice"
        if problem is not None:
            raise artifact_refusal(label, f"its entry `{info.filename[:80]}` {problem}",
                                   REPACK)
        seen.add(info.filename.rstrip("/"))
        total += info.file_size
    if total > MAX_UNPACKED_BYTES:
        raise artifact_refusal(label, f"unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB",
                               REPACK)
    return entries


def _open_zip(data: bytes, label: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError):
        raise artifact_refusal(label, "is not a zip file", REPACK) from None


def read_artifact(data: bytes, label: str) -> Manifest:
    """The validated manifest of the artifact ``data``: entries safe (``E-REG-003``),
    ``murmur.yaml`` parses (``E-MAN-*``) and names only files the artifact holds."""
    if len(data) > MAX_ARTIFACT_BYTES:
        raise artifact_refusal(label, f"is larger than {MAX_ARTIFACT_BYTES // 2**20} MiB",
                               "leave data the agent does not need out of the capsule")
    with _open_zip(data, label) as archive:
        entries = _checked_entries(archive, label)
        names = {info.filename for info in entries if not info.is_dir()}
        if MANIFEST_FILE not in names:
            raise artifact_refusal(label, "has no murmur.yaml at its top", REPACK)
        try:
            with archive.open(MANIFEST_FILE) as handle:
                text = handle.read(MAX_ARTIFACT_BYTES)
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError,
                zlib.error):
            raise artifact_refusal(label, "has a murmur.yaml that cannot be read",
                                   REPACK) from None
    source = f"{label}:{MANIFEST_FILE}"
    manifest = parse_manifest(text, source=source)
    check_files(manifest, names, source)
    return manifest


# --- Extracting --------------------------------------------------------------------------

def extract(data: bytes, label: str, dest_dir: Path) -> None:
    """Write every entry of the artifact ``data`` below ``dest_dir``, all of them checked
    before the first is written."""
    with _open_zip(data, label) as archive:
        for info in _checked_entries(archive, label):
            _extract_entry(archive, info, dest_dir, label)


def _extract_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest_dir: Path,
                   label: str) -> None:
    target = dest_dir.joinpath(*PurePosixPath(info.filename).parts)
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    executable = bool((info.external_attr >> 16) & 0o111)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        with archive.open(info) as source, os.fdopen(
                os.open(target, flags, _EXECUTABLE_MODE if executable else _FILE_MODE),
                "wb") as out:
            for chunk in iter(lambda: source.read(1 << 16), b""):
                out.write(chunk)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error):
        raise artifact_refusal(label, f"its entry `{info.filename}` does not unpack",
                               REPACK) from None
