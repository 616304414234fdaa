"""Artifact stores: packing a capsule, installing it, finding it, unpacking it, the lock.

An artifact is a capsule's source directory packed into ``<name>-<version>.mur.zip``.
Packing is reproducible (sorted entries, fixed timestamps, fixed permissions), so the same
source always gives the same sha256, and an installed capsule is bound to that hash.

Layout of a store (the project's ``.murmur/artifacts`` or ``$MURMUR_HOME/artifacts``)::

    <scope>/<name>/<version>/<name>-<version>.mur.zip
    <scope>/<name>/<version>/sha256

A capsule installed from its file is ``local/<name>``. Lookups take the project store
first, then the global one. ``murmur.lock`` in the project pins capsules to a version and
a sha256; ``mur lock`` writes it, nothing else does.
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from launcher.admission.manifest import (
    Manifest,
    check_files,
    load_manifest,
    name_problem,
    parse_manifest,
    version_problem,
)
from launcher.admission.yaml_files import (
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
)
from launcher.diagnostics import DiagnosticError
from launcher.home.paths import global_store, project_store

ARTIFACT_SUFFIX = ".mur.zip"
LOCK_FILE = "murmur.lock"
LOCAL_SCOPE = "local"
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
_SHA256 = re.compile(r"[0-9a-f]{64}")

StoreKind = Literal["project", "global"]


@dataclass(frozen=True, slots=True)
class PackedArtifact:
    path: Path
    sha256: str
    manifest: Manifest


@dataclass(frozen=True, slots=True)
class InstalledArtifact:
    """An artifact in a store: ``capsule`` is ``<scope>/<name>``; ``store`` says which."""

    capsule: str
    version: str
    path: Path
    sha256: str
    manifest: Manifest
    store: StoreKind


@dataclass(frozen=True, slots=True)
class LockPin:
    version: str
    sha256: str


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


def artifact_path(store: Path, capsule: str, version: str) -> Path:
    """Where ``capsule`` at ``version`` lives in ``store`` (whether or not it is there)."""
    scope, name = split_capsule(capsule, version)
    return store / scope / name / version / artifact_name(name, version)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- Writing files -----------------------------------------------------------------------

def _write_atomically(path: Path, data: bytes, mode: int = _FILE_MODE) -> None:
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
        _write_atomically(target, data)
    except OSError as exc:
        raise _pack_refusal(Path(source_dir), f"cannot write {target} ({exc.strerror})",
                            "choose a writable place with `-o FILE`") from None
    return PackedArtifact(path=target, sha256=sha256_of(data), manifest=manifest)


# --- Reading artifacts -------------------------------------------------------------------

def _artifact_refusal(label: str, problem: str, fix: str) -> DiagnosticError:
    return DiagnosticError("E-REG-003", label, file=label, problem=problem, fix=fix)


_REPACK = "pack the capsule again with `mur pack`"


def _checked_entries(archive: zipfile.ZipFile, label: str) -> list[zipfile.ZipInfo]:
    """Every entry of ``archive``, refusing any that would not unpack safely."""
    entries = archive.infolist()
    if len(entries) > MAX_ENTRIES:
        raise _artifact_refusal(label, f"holds more than {MAX_ENTRIES} entries", _REPACK)
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
            raise _artifact_refusal(label, f"its entry `{info.filename[:80]}` {problem}",
                                    _REPACK)
        seen.add(info.filename.rstrip("/"))
        total += info.file_size
    if total > MAX_UNPACKED_BYTES:
        raise _artifact_refusal(label, f"unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB",
                                _REPACK)
    return entries


def _open_zip(data: bytes, label: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError):
        raise _artifact_refusal(label, "is not a zip file", _REPACK) from None


def read_artifact(data: bytes, label: str) -> Manifest:
    """The validated manifest of the artifact ``data``: entries safe (``E-REG-003``),
    ``murmur.yaml`` parses (``E-MAN-*``) and names only files the artifact holds."""
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _artifact_refusal(label, f"is larger than {MAX_ARTIFACT_BYTES // 2**20} MiB",
                                "leave data the agent does not need out of the capsule")
    with _open_zip(data, label) as archive:
        entries = _checked_entries(archive, label)
        names = {info.filename for info in entries if not info.is_dir()}
        if MANIFEST_FILE not in names:
            raise _artifact_refusal(label, "has no murmur.yaml at its top", _REPACK)
        try:
            with archive.open(MANIFEST_FILE) as handle:
                text = handle.read(MAX_ARTIFACT_BYTES)
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, EOFError,
                zlib.error):
            raise _artifact_refusal(label, "has a murmur.yaml that cannot be read",
                                    _REPACK) from None
    source = f"{label}:{MANIFEST_FILE}"
    manifest = parse_manifest(text, source=source)
    check_files(manifest, names, source)
    return manifest


#: The manifests of artifacts already read in this process, by the sha256 of their bytes.
#: Admitting a roster opens each member's artifact, most of them the same few capsules:
#: the same bytes always give the same manifest, so each is parsed once.
_READ_MANIFESTS: dict[str, Manifest] = {}
_READ_MANIFESTS_KEPT = 64


def _read_artifact_once(data: bytes, digest: str, label: str) -> Manifest:
    """:func:`read_artifact` of ``data``, whose sha256 is ``digest``; a refusal is never
    remembered (it names ``label``), a manifest is."""
    manifest = _READ_MANIFESTS.get(digest)
    if manifest is None:
        manifest = read_artifact(data, label)
        if len(_READ_MANIFESTS) >= _READ_MANIFESTS_KEPT:
            _READ_MANIFESTS.clear()
        _READ_MANIFESTS[digest] = manifest
    return manifest


def _read_file(path: Path, label: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ARTIFACT_BYTES + 1)
    except FileNotFoundError:
        raise _artifact_refusal(label, "does not exist", "give the path of a .mur.zip file "
                                "that `mur pack` wrote") from None
    except OSError as exc:
        raise _artifact_refusal(label, f"cannot be read ({exc.strerror})",
                                "make it a readable file") from None
    return data


# --- Installing --------------------------------------------------------------------------

def install(artifact_file: Path, project_dir: Path, *, to_global: bool = False,
            force: bool = False) -> tuple[InstalledArtifact, bool]:
    """Install ``artifact_file`` as ``local/<name>`` in the project or the global store.

    Returns the installed artifact and whether the store changed. The same bytes at an
    installed version change nothing; other bytes are refused (``E-REG-002``) unless
    ``force``.
    """
    label = str(artifact_file)
    data = _read_file(Path(artifact_file), label)
    manifest = read_artifact(data, label)
    capsule = f"{LOCAL_SCOPE}/{manifest.name}"
    kind: StoreKind = "global" if to_global else "project"
    store = global_store() if to_global else project_store(Path(project_dir).resolve())
    target = artifact_path(store, capsule, manifest.version)
    offered = sha256_of(data)
    installed = InstalledArtifact(capsule=capsule, version=manifest.version, path=target,
                                  sha256=offered, manifest=manifest, store=kind)
    if target.is_file():
        current = sha256_of(_read_file(target, str(target)))
        if current == offered and _recorded_sha256(target) == offered:
            return installed, False
        if current != offered and not force:
            raise DiagnosticError("E-REG-002", str(target), capsule=capsule,
                                  version=manifest.version, store=str(store),
                                  installed=current, offered=offered, file=label)
    try:
        _write_atomically(target, data)
        _write_atomically(target.parent / "sha256", f"{offered}\n".encode())
    except OSError as exc:
        raise _artifact_refusal(label, f"cannot be installed into {store} ({exc.strerror})",
                                "make the store writable") from None
    return installed, True


def _recorded_sha256(artifact: Path) -> str | None:
    try:
        return (artifact.parent / "sha256").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


# --- Finding installed artifacts ---------------------------------------------------------

def locate(project_dir: Path, capsule: str, version: str) -> tuple[Path, StoreKind] | None:
    """Where ``capsule`` at ``version`` is installed: the project store, else the global
    store, else ``None``."""
    stores: tuple[tuple[StoreKind, Path], ...] = (
        ("project", project_store(Path(project_dir))), ("global", global_store()))
    for kind, store in stores:
        path = artifact_path(store, capsule, version)
        if path.is_file():
            return path, kind
    return None


def not_installed(project_dir: Path, capsule: str, version: str) -> DiagnosticError:
    """The ``E-REG-001`` refusal for a capsule in neither store."""
    _, name = split_capsule(capsule, version)
    return DiagnosticError("E-REG-001", capsule, capsule=capsule, version=version,
                           project_store=project_store(Path(project_dir)),
                           global_store=global_store(), artifact=artifact_name(name, version))


def open_installed(path: Path, capsule: str, version: str,
                   store: StoreKind) -> InstalledArtifact:
    """The artifact at ``path``, its bytes hashed and its manifest validated.

    Refuses (``E-REG-003``) bytes that differ from the sha256 recorded at install and a
    manifest naming another capsule or version; ``E-MAN-*`` for a manifest that does not
    parse.
    """
    label = str(path)
    data = _read_file(path, label)
    digest = sha256_of(data)
    recorded = _recorded_sha256(path)
    if recorded is not None and recorded != digest:
        raise _artifact_refusal(label, f"has sha256 {digest}, but {recorded} was recorded when "
                                "it was installed", f"install it again with `mur install "
                                f"--force {path.name}`")
    manifest = _read_artifact_once(data, digest, label)
    _, name = split_capsule(capsule, version)
    if (manifest.name, manifest.version) != (name, version):
        raise _artifact_refusal(label, f"holds the capsule {manifest.name} {manifest.version}, "
                                f"not {capsule} {version}",
                                "install artifacts with `mur install`, never by copying them")
    return InstalledArtifact(capsule=capsule, version=version, path=path, sha256=digest,
                             manifest=manifest, store=store)


def resolve(project_dir: Path, capsule: str, version: str, *,
            honour_lock: bool = True) -> InstalledArtifact:
    """The installed artifact a member runs: looked up in the project store, then the
    global store, and checked against the project's ``murmur.lock`` when it pins the
    capsule (``E-REG-005``). Not installed: ``E-REG-001``."""
    project_dir = Path(project_dir)
    found = locate(project_dir, capsule, version)
    if found is None:
        raise not_installed(project_dir, capsule, version)
    artifact = open_installed(found[0], capsule, version, found[1])
    if honour_lock:
        pins = read_lock(project_dir)
        if pins is not None:
            check_pin(project_dir, pins, artifact, subject=f"the lookup of {capsule}")
    return artifact


# --- Unpacking ---------------------------------------------------------------------------

def unpack(artifact: InstalledArtifact | Path, dest_dir: Path) -> Path:
    """Extract ``artifact`` into ``dest_dir`` (created; must be empty) and return it.

    Entries are checked before anything is written: no absolute path, no ``..``, no
    symbolic link, no special file. Given an :class:`InstalledArtifact`, the bytes read
    must still have its sha256, or ``E-RUN-047`` refuses them.
    """
    path = artifact.path if isinstance(artifact, InstalledArtifact) else Path(artifact)
    data = _read_file(path, str(path))
    if isinstance(artifact, InstalledArtifact) and sha256_of(data) != artifact.sha256:
        raise DiagnosticError("E-RUN-047", str(path), capsule=artifact.capsule,
                              version=artifact.version, found=sha256_of(data),
                              expected=artifact.sha256)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if any(dest_dir.iterdir()):
        raise FileExistsError(f"{dest_dir} is not empty; unpack into an empty directory")
    with _open_zip(data, str(path)) as archive:
        for info in _checked_entries(archive, str(path)):
            _extract(archive, info, dest_dir, str(path))
    return dest_dir


def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest_dir: Path,
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
        raise _artifact_refusal(label, f"its entry `{info.filename}` does not unpack",
                                _REPACK) from None


# --- murmur.lock -------------------------------------------------------------------------

def lock_path(project_dir: Path) -> Path:
    return Path(project_dir) / LOCK_FILE


def _lock_refusal(path: Path, location: tuple[str | int, ...], problem: str,
                  fix: str = "correct it by hand, or write it again with `mur lock`"
                  ) -> DiagnosticError:
    return DiagnosticError("E-REG-004", dotted(location) or str(path), file=str(path),
                           problem=problem, fix=fix)


def _pin_of(path: Path, capsule: str, value: Any) -> LockPin:
    where = ("artifacts", capsule)
    if not isinstance(value, dict):
        raise _lock_refusal(path, where, f"`{dotted(where)}` must be a mapping with "
                            f"`version` and `sha256`, not {describe_value(value)}")
    for key in value:
        if key not in ("version", "sha256"):
            raise _lock_refusal(path, (*where, key), f"`{dotted((*where, key))}` is not a key "
                                "murmur.lock accepts", "keep only `version` and `sha256`")
    version, digest = value.get("version"), value.get("sha256")
    if not isinstance(version, str) or version_problem(version) is not None:
        raise _lock_refusal(path, (*where, "version"), f"`{dotted((*where, 'version'))}` must "
                            f"be an exact version, not {describe_value(version)}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise _lock_refusal(path, (*where, "sha256"), f"`{dotted((*where, 'sha256'))}` must "
                            f"be 64 lower-case hex digits, not {describe_value(digest)}")
    return LockPin(version=version, sha256=digest)


def parse_lock(text: bytes | str, path: Path) -> dict[str, LockPin]:
    """The pins in a lock's ``text``; ``E-REG-004`` when it does not have the lock's shape."""
    try:
        data = read_yaml(text, text_paths=(("artifacts", "*", "version"),
                                           ("artifacts", "*", "sha256")))
    except YamlFault as fault:
        raise _lock_refusal(path, fault.location, fault.problem, fault.fix) from None
    if not isinstance(data, dict):
        raise _lock_refusal(path, (), f"must hold a mapping with `lock_version: 1` and "
                            f"`artifacts`, not {describe_value(data)}")
    for key in data:
        if key not in ("lock_version", "artifacts"):
            raise _lock_refusal(path, (key,), f"`{key}` is not a key murmur.lock accepts",
                                "keep only `lock_version` and `artifacts`")
    version = data.get("lock_version")
    if type(version) is not int or version != 1:
        raise _lock_refusal(path, ("lock_version",), f"`lock_version` must be 1, not "
                            f"{describe_value(version)}")
    artifacts = data.get("artifacts")
    if artifacts is None:
        return {}
    if not isinstance(artifacts, dict):
        raise _lock_refusal(path, ("artifacts",), f"`artifacts` must be a mapping, not "
                            f"{describe_value(artifacts)}")
    pins: dict[str, LockPin] = {}
    for capsule, value in artifacts.items():
        problem = capsule_problem(capsule)
        if problem is not None:
            raise _lock_refusal(path, ("artifacts", capsule), f"`{capsule}` is not a capsule "
                                f"name: {problem}", "pin capsules as `<scope>/<name>`")
        pins[capsule] = _pin_of(path, capsule, value)
    return pins


def read_lock(project_dir: Path) -> dict[str, LockPin] | None:
    """The project's pins, or ``None`` when it has no ``murmur.lock``."""
    path = lock_path(project_dir)
    try:
        data = read_text_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _lock_refusal(path, (), f"cannot be read ({exc.strerror})",
                            "make it a readable file") from None
    return parse_lock(data, path)


def render_lock(pins: Mapping[str, LockPin]) -> str:
    """The text of a ``murmur.lock`` holding ``pins``, sorted, versions always quoted."""
    lines = ["# murmur.lock: written by `mur lock`. Admission reads it and never changes it.",
             "lock_version: 1"]
    if not pins:
        return "\n".join([*lines, "artifacts: {}"]) + "\n"
    lines.append("artifacts:")
    for capsule in sorted(pins):
        pin = pins[capsule]
        lines += [f"  {capsule}:", f"    version: {_quoted(pin.version)}",
                  f"    sha256: {_quoted(pin.sha256)}"]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    dumped: str = yaml.safe_dump(text, default_style='"', explicit_end=False)
    return dumped.strip().removesuffix("...").strip()


def write_lock(project_dir: Path, pins: Mapping[str, LockPin]) -> Path:
    path = lock_path(project_dir)
    _write_atomically(path, render_lock(pins).encode("utf-8"))
    return path


def check_pin(project_dir: Path, pins: Mapping[str, LockPin], artifact: InstalledArtifact,
              subject: str, path: str | None = None) -> None:
    """Refuse (``E-REG-005``) an artifact that disagrees with the lock's pin of its
    capsule; a capsule the lock does not pin passes."""
    pin = pins.get(artifact.capsule)
    if pin is None or (pin.version, pin.sha256) == (artifact.version, artifact.sha256):
        return
    raise DiagnosticError("E-REG-005", path or str(lock_path(project_dir)),
                          file=lock_path(project_dir), capsule=artifact.capsule,
                          pinned_version=pin.version, pinned_sha256=pin.sha256,
                          subject=subject, version=artifact.version, sha256=artifact.sha256)


def installed_capsules(store: Path) -> Iterator[tuple[str, str, Path]]:
    """``(capsule, version, artifact path)`` of every artifact in ``store``."""
    for artifact in sorted(Path(store).glob(f"*/*/*/*{ARTIFACT_SUFFIX}")):
        version_dir = artifact.parent
        name_dir = version_dir.parent
        yield f"{name_dir.parent.name}/{name_dir.name}", version_dir.name, artifact
