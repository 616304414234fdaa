"""Artifact stores: installing a capsule's artifact, finding it, opening it, unpacking it.

Layout of a store (the project's ``.murmur/artifacts`` or ``$MURMUR_HOME/artifacts``)::

    <scope>/<name>/<version>/<name>-<version>.mur.zip
    <scope>/<name>/<version>/sha256

A capsule installed from its file is ``local/<name>``. Lookups take the project store
first, then the global one, and an installed capsule is bound to the sha256 recorded
when it was installed; ``murmur.lock`` (``lock.py``) may pin it further.

In order: an installed artifact, where one lives, reading its file (each manifest parsed
once a process), installing (``E-REG-002``), finding and opening (``E-REG-001``, whose
hint is ``install_hint.py``'s, ``E-REG-003``), resolving against the lock (``E-REG-005``),
unpacking (``E-RUN-047``), and listing a store. The artifact itself (packing, reading,
extracting) is ``artifacts.py``'s; its names are re-exported here for the modules that
imported them from the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from launcher.admission.artifacts import (
    ARTIFACT_SUFFIX,
    FIXED_DATE_TIME,
    MAX_ARTIFACT_BYTES,
    PackedArtifact,
    artifact_name,
    artifact_refusal,
    capsule_problem,
    extract,
    pack,
    pack_bytes,
    read_artifact,
    sha256_of,
    split_capsule,
    write_atomically,
)
from launcher.admission.install_hint import install_fix
from launcher.admission.lock import (
    LockPin,
    lock_path,
    parse_lock,
    read_lock,
    render_lock,
    write_lock,
)
from launcher.admission.manifest import Manifest
from launcher.diagnostics import DiagnosticError
from launcher.home.paths import global_store, project_store

LOCAL_SCOPE = "local"

StoreKind = Literal["project", "global"]


@dataclass(frozen=True, slots=True)
class InstalledArtifact:
    """An artifact in a store: ``capsule`` is ``<scope>/<name>``; ``store`` says which."""

    capsule: str
    version: str
    path: Path
    sha256: str
    manifest: Manifest
    store: StoreKind


# --- Where an artifact lives -------------------------------------------------------------

def artifact_path(store: Path, capsule: str, version: str) -> Path:
    """Where ``capsule`` at ``version`` lives in ``store`` (whether or not it is there)."""
    scope, name = split_capsule(capsule, version)
    return store / scope / name / version / artifact_name(name, version)


# --- Reading an installed artifact's file ------------------------------------------------

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
        raise artifact_refusal(label, "does not exist", "give the path of a .mur.zip file "
                               "that `mur pack` wrote") from None
    except OSError as exc:
        raise artifact_refusal(label, f"cannot be read ({exc.strerror})",
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
        write_atomically(target, data)
        write_atomically(target.parent / "sha256", f"{offered}\n".encode())
    except OSError as exc:
        raise artifact_refusal(label, f"cannot be installed into {store} ({exc.strerror})",
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
    split_capsule(capsule, version)  # a malformed name or version is refused first
    return DiagnosticError("E-REG-001", capsule, capsule=capsule, version=version,
                           project_store=project_store(Path(project_dir)),
                           global_store=global_store(),
                           fix=install_fix(Path(project_dir), capsule, version, roster=False,
                                           installed=installed_anywhere(Path(project_dir))))


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
        raise artifact_refusal(label, f"has sha256 {digest}, but {recorded} was recorded when "
                               "it was installed", f"install it again with `mur install "
                               f"--force {path.name}`")
    manifest = _read_artifact_once(data, digest, label)
    _, name = split_capsule(capsule, version)
    if (manifest.name, manifest.version) != (name, version):
        raise artifact_refusal(label, f"holds the capsule {manifest.name} {manifest.version}, "
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
    extract(data, str(path), dest_dir)
    return dest_dir


# --- The lock's pins ---------------------------------------------------------------------

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


# --- Listing a store ---------------------------------------------------------------------

def installed_capsules(store: Path) -> Iterator[tuple[str, str, Path]]:
    """``(capsule, version, artifact path)`` of every artifact in ``store``."""
    for artifact in sorted(Path(store).glob(f"*/*/*/*{ARTIFACT_SUFFIX}")):
        version_dir = artifact.parent
        name_dir = version_dir.parent
        yield f"{name_dir.parent.name}/{name_dir.name}", version_dir.name, artifact


def installed_anywhere(project_dir: Path) -> list[tuple[str, str]]:
    """``(capsule, version)`` of every artifact in the project store, then the global
    store."""
    return [(capsule, version)
            for store in (project_store(Path(project_dir)), global_store())
            for capsule, version, _ in installed_capsules(store)]


__all__ = ["FIXED_DATE_TIME", "LOCAL_SCOPE", "InstalledArtifact", "LockPin", "PackedArtifact",
           "StoreKind", "artifact_name", "artifact_path", "capsule_problem", "check_pin",
           "install", "installed_anywhere", "installed_capsules", "locate", "not_installed",
           "open_installed", "pack", "pack_bytes", "parse_lock", "read_lock", "render_lock",
           "resolve", "sha256_of", "unpack", "write_lock"]
