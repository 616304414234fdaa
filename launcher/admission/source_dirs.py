"""The capsule sources a project holds: the project directory itself and each directory
directly under it that holds a ``murmur.yaml``, by the capsule and version each packs to
(:class:`Source`), and those whose ``murmur.yaml`` does not read (:class:`BrokenSource`,
with the name and version its YAML still shows).

In order: the two kinds of source, then :func:`project_sources`, which finds them, and
how a broken one is read. What the developer loop does with them (warnings, faults,
``--rebuild``) is :mod:`launcher.admission.sources`'s; admission's hint for a capsule not
installed names a member's source from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from launcher.admission.manifest import load_manifest
from launcher.admission.roster_structure import MemberSpec
from launcher.admission.yaml_files import YamlFault
from launcher.diagnostics import DiagnosticError

__all__ = ["BrokenSource", "Source", "project_sources"]


@dataclass(frozen=True, slots=True)
class Source:
    """A capsule source directory in the project: the capsule it packs to."""

    capsule: str
    version: str
    path: Path


@dataclass(frozen=True, slots=True)
class BrokenSource:
    """A directory of the project whose ``murmur.yaml`` does not read: the fault, and the
    name and version its YAML still shows (``None`` where it shows none)."""

    path: Path
    code: str
    problem: str
    name: str | None
    version: str | None

    def is_for(self, member: MemberSpec) -> bool:
        capsule_name = member.capsule.removeprefix("local/")
        if self.name is not None:
            return (self.name == capsule_name and member.capsule.startswith("local/")
                    and self.version in (None, member.version))
        return self.path.name == capsule_name


def project_sources(project: Path, broken: list[BrokenSource] | None = None
                    ) -> dict[tuple[str, str], Source]:
    """Every capsule source in ``project`` by (capsule, version); a directory whose
    ``murmur.yaml`` does not read is appended to ``broken`` (when given)."""
    candidates = [project, *sorted(child for child in project.iterdir()
                                   if child.is_dir() and not child.name.startswith("."))]
    found: dict[tuple[str, str], Source] = {}
    for directory in candidates:
        if not (directory / "murmur.yaml").is_file():
            continue
        try:
            manifest = load_manifest(directory / "murmur.yaml")
        except (DiagnosticError, YamlFault, OSError) as fault:
            if broken is not None:
                broken.append(_broken(directory, fault))
            continue
        capsule = f"local/{manifest.name}"
        found.setdefault((capsule, manifest.version), Source(capsule, manifest.version,
                                                             directory))
    return found


def _broken(directory: Path, fault: Exception) -> BrokenSource:
    if isinstance(fault, DiagnosticError):
        code, problem = fault.code, fault.diagnostic.message
    elif isinstance(fault, YamlFault):
        code, problem = "E-MAN-001", fault.problem
    else:
        code, problem = "E-MAN-002", f"cannot be read ({fault})"
    import yaml

    try:   # the name and version the YAML still shows, to know whose source it is
        document = yaml.safe_load((directory / "murmur.yaml").read_text(errors="replace"))
    except (yaml.YAMLError, OSError):   # it does not even parse: its folder's name says
        document = None
    if not isinstance(document, dict):
        return BrokenSource(directory, code, problem, None, None)
    name, version = document.get("name"), document.get("version")
    return BrokenSource(directory, code, problem, name if isinstance(name, str) else None,
                        str(version) if isinstance(version, (str, int, float)) else None)
