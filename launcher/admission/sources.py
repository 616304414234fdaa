"""Capsule sources that live in a project, for the developer loop: edit an agent, run the
formation again, and the new code runs.

In this order (:func:`project_sources`, which finds them, is
:mod:`launcher.admission.source_dirs`'s, re-exported here): :func:`source_faults` names every
member whose source does not pack (``W-ROS-005``: a typo in a member's manifest never
lets the old artifact run unsaid, nor hides behind ``E-ROS-007``); :func:`source_warnings`
names every member whose source packs to other bytes than the artifact it is bound to
(``W-ROS-003``; only a source with a file modified after the install is packed to
compare), or does not pack at all (``W-ROS-005``); and :func:`rebuild` packs every
member's source and, only when all pack, installs them (replacing) before admission,
for ``mur run --roster --rebuild`` (``E-ROS-013`` for each that does not: nothing is
installed and nothing starts). A source is a member's when it is ``local/<its name>`` at
the roster's version (a source whose manifest does not read: the name and version its
YAML still shows, else its directory's name); packing is reproducible, so "differs" is
exact, never a guess from file times.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from launcher.admission.roster import ROSTER_FILE, AdmittedRoster, MemberSpec, read_roster
from launcher.admission.source_dirs import BrokenSource, Source, project_sources
from launcher.admission.store import install, pack_bytes
from launcher.diagnostics import Diagnostic, DiagnosticError, diagnostic
from launcher.errors import LauncherError

__all__ = ["BrokenSource", "RebuildRefused", "Source", "project_sources", "rebuild",
           "source_faults", "source_warnings"]


class RebuildRefused(LauncherError):
    """``--rebuild`` found member sources that do not pack: each one's ``E-ROS-013``."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics


def _members_sources(project: Path, members: Iterable[MemberSpec],
                     broken: list[BrokenSource] | None = None
                     ) -> list[tuple[MemberSpec, Source]]:
    sources = project_sources(project, broken)
    pairs = []
    for member in members:
        source = sources.get((member.capsule, member.version))
        if source is not None:
            pairs.append((member, source))
    return pairs


def _relative(path: Path, project: Path) -> str:
    return str(path.relative_to(project)) if path != project else "."


def _broken_members(project: Path, members: Iterable[MemberSpec],
                    broken: list[BrokenSource]) -> list[tuple[MemberSpec, BrokenSource]]:
    """Each member whose source is a broken one (and has no good source of its own)."""
    members = list(members)
    good = {(member.capsule, member.version) for member, _ in
            _members_sources(project, members)}
    return [(member, source) for member in members for source in broken
            if source.is_for(member) and (member.capsule, member.version) not in good]


def source_faults(project: Path, roster_file: str = ROSTER_FILE) -> list[Diagnostic]:
    """``W-ROS-005`` for each member of the roster in ``project`` whose source there has a
    ``murmur.yaml`` that does not read (nothing when the roster itself does not read:
    admission names that)."""
    try:
        roster = read_roster(project)
    except (DiagnosticError, OSError):
        return []
    broken: list[BrokenSource] = []
    project_sources(project, broken)
    return [_fault("W-ROS-005", member, source.path, project, source.code, source.problem,
                   roster_file)
            for member, source in _broken_members(project, roster.members, broken)]


def _fault(code: str, member: MemberSpec, path: Path, project: Path, fault_code: str,
           problem: str, roster_file: str = ROSTER_FILE) -> Diagnostic:
    source = _relative(path, project)
    return diagnostic(code, member.field(), file=roster_file, field=member.field(),
                      member=member.name, capsule=member.capsule, version=member.version,
                      source=source, fault=f"{fault_code}: {problem}",
                      manifest=str(Path(source) / "murmur.yaml"))


def rebuild(project: Path) -> list[tuple[str, Source, bool]]:
    """Pack each member's source in ``project``; when every one packs, install them into
    the project store, replacing what is there: (member, source, whether the store
    changed), in roster order. :class:`RebuildRefused` (one ``E-ROS-013`` for each member
    whose source does not pack, its manifest's own code quoted) installs nothing;
    ``DiagnosticError`` for a roster that does not read."""
    roster = read_roster(project)
    broken: list[BrokenSource] = []
    faults = []
    packed = []
    seen: set[tuple[str, str]] = set()
    for member, source in _members_sources(project, roster.members, broken):
        if (source.capsule, source.version) in seen:
            continue  # two members run one capsule: one install
        seen.add((source.capsule, source.version))
        try:
            data, _ = pack_bytes(source.path)
        except DiagnosticError as fault:
            faults.append(_fault("E-ROS-013", member, source.path, project, fault.code,
                                 fault.diagnostic.message))
            continue
        packed.append((member, source, data))
    faults += [_fault("E-ROS-013", member, source.path, project, source.code, source.problem)
               for member, source in _broken_members(project, roster.members, broken)]
    if faults:
        raise RebuildRefused(faults)
    done = []
    for member, source, data in packed:
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
    """Whether any file or folder of ``source`` was modified after ``artifact`` was
    written (stat only, so a launch never packs a large source that did not change; a
    folder's time moves when a file in it is added, removed or renamed)."""
    try:
        installed = artifact.stat().st_mtime_ns
    except OSError:
        return True
    for path in (source, *source.rglob("*")):
        try:
            if path.stat().st_mtime_ns > installed:
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
        except DiagnosticError as fault:   # the installed artifact runs, said so
            warnings.append(_fault("W-ROS-005", spec, source.path, admitted.project_dir,
                                   fault.code, fault.diagnostic.message))
            continue
        if hashlib.sha256(data).hexdigest() == member.sha256:
            continue
        relative = source.path.relative_to(admitted.project_dir) if source.path != \
            admitted.project_dir else Path(".")
        warnings.append(diagnostic(
            "W-ROS-003", member.field(), file=ROSTER_FILE, field=member.field(),
            member=member.name,
            capsule=member.capsule, version=member.version, source=str(relative)))
    return warnings
