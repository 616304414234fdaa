"""Capsule sources that live in a project, for the developer loop: edit an agent, run the
formation again, and the new code runs.

In this order: :func:`project_sources` finds them (the project directory itself and each
directory directly under it that holds a ``murmur.yaml``), :func:`source_warnings` names
every member whose source packs to other bytes than the artifact it is bound to
(``W-ROS-003``, given by ``mur doctor`` and at launch; only a source with a file
modified after the install is packed to compare), and :func:`rebuild` packs and
installs (replacing) each member's source before admission, for ``mur run --roster
--rebuild``. A source is a member's when it is ``local/<its name>`` at the roster's
version; packing is reproducible, so "differs" is exact, never a guess from file times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.admission.manifest import load_manifest
from launcher.admission.roster import ROSTER_FILE, AdmittedRoster, MemberSpec, read_roster
from launcher.admission.store import install, pack_bytes
from launcher.admission.yaml_files import YamlFault
from launcher.diagnostics import Diagnostic, DiagnosticError, diagnostic

__all__ = ["Source", "project_sources", "rebuild", "source_warnings"]


@dataclass(frozen=True, slots=True)
class Source:
    """A capsule source directory in the project: the capsule it packs to."""

    capsule: str
    version: str
    path: Path


def project_sources(project: Path) -> dict[tuple[str, str], Source]:
    """Every capsule source in ``project`` by (capsule, version); a directory whose
    ``murmur.yaml`` does not read is skipped (admission or ``mur pack`` names its fault)."""
    candidates = [project, *sorted(child for child in project.iterdir()
                                   if child.is_dir() and not child.name.startswith("."))]
    found: dict[tuple[str, str], Source] = {}
    for directory in candidates:
        if not (directory / "murmur.yaml").is_file():
            continue
        try:
            manifest = load_manifest(directory / "murmur.yaml")
        except (DiagnosticError, YamlFault, OSError):
            continue
        capsule = f"local/{manifest.name}"
        found.setdefault((capsule, manifest.version), Source(capsule, manifest.version,
                                                             directory))
    return found


def _members_sources(project: Path, members: Iterable[MemberSpec]
                     ) -> list[tuple[MemberSpec, Source]]:
    sources = project_sources(project)
    pairs = []
    for member in members:
        source = sources.get((member.capsule, member.version))
        if source is not None:
            pairs.append((member, source))
    return pairs


def rebuild(project: Path) -> list[tuple[str, Source, bool]]:
    """Pack each member's source in ``project`` and install it into the project store,
    replacing what is there: (member, source, whether the store changed), in roster
    order. ``DiagnosticError`` for a roster that does not read or a source that does not
    pack (its ``E-MAN``/``E-REG`` code)."""
    roster = read_roster(project)
    done = []
    seen: set[tuple[str, str]] = set()
    for member, source in _members_sources(project, roster.members):
        if (source.capsule, source.version) in seen:
            continue  # two members run one capsule: one install
        seen.add((source.capsule, source.version))
        data, _ = pack_bytes(source.path)
        staging = project / ".murmur" / "rebuild"
        staging.mkdir(parents=True, exist_ok=True)
        artifact = staging / f"{source.path.name}.mur.zip"
        artifact.write_bytes(data)
        try:
            _, changed = install(artifact, project, force=True)
        finally:
            artifact.unlink(missing_ok=True)
        done.append((member.name, source, changed))
    return done


def _touched_since(source: Path, artifact: Path) -> bool:
    """Whether any file of ``source`` was modified after ``artifact`` was written (stat
    only, so a launch never packs a large source that did not change)."""
    try:
        installed = artifact.stat().st_mtime_ns
    except OSError:
        return True
    for path in source.rglob("*"):
        try:
            if path.is_file() and path.stat().st_mtime_ns > installed:
                return True
        except OSError:
            return True
    return False


def source_warnings(admitted: AdmittedRoster) -> list[Diagnostic]:
    """``W-ROS-003`` for each member whose source in the project packs to other bytes
    than the artifact admission bound it to."""
    import hashlib

    warnings = []
    members = {member.name: member for member in admitted.members}
    specs = [MemberSpec(name=member.name, capsule=member.capsule, version=member.version,
                        entry=member.entry, index=member.index) for member in admitted.members]
    for spec, source in _members_sources(admitted.project_dir, specs):
        member = members[spec.name]
        if not _touched_since(source.path, member.artifact):
            continue  # nothing in the source changed after the install: no packing needed
        try:
            data, _ = pack_bytes(source.path)
        except DiagnosticError:
            continue  # a source that does not pack is `mur pack`'s to name
        if hashlib.sha256(data).hexdigest() == member.sha256:
            continue
        relative = source.path.relative_to(admitted.project_dir) if source.path != \
            admitted.project_dir else Path(".")
        warnings.append(diagnostic(
            "W-ROS-003", member.field(), file=ROSTER_FILE, field=member.field(),
            member=member.name,
            capsule=member.capsule, version=member.version, source=str(relative)))
    return warnings
