"""``roster.yaml`` and its admission, in exactly the roster format's order (docs/admission.md).

| Order | Check                                                         | Code      |
|-------|---------------------------------------------------------------|-----------|
| 1     | ``roster.yaml`` reads and has the shape of the Fields table   | E-ROS-001 |
| 2     | Member names are unique                                       | E-ROS-003 |
| 3     | Exactly one member has ``entry: true``                        | E-ROS-002 |
| 4     | Every rule's ``from`` and ``to`` names a member               | E-ROS-004 |
| 5     | No rule lists the entry member in ``to``                      | E-ROS-008 |
| 5b    | Version 2: every limit at least 1, no edge bounded twice      | E-ROS-012 |
| 6     | Each member installed and its manifest parses; lock agrees   | E-ROS-007, E-REG-005 |
| 7     | Every member a rule calls serves peers                        | E-ROS-005 |
| 7b    | Version 2: every bound can be met by the members it bounds    | E-ROS-012 |
| 8     | With any edge, every member's door requires authentication    | E-ROS-006 |
| 9     | ``agent.requires`` installed; each ``python`` agent compiles  | E-ROS-011, E-ROS-010 |

Checks 1-5 (:func:`check_structure`, in ``roster_structure.py``) read no store; check 9
is murmur-door's own, after the roster format's eight, and runs no agent code
(``launcher/admission/agent_check.py``). Check 6 takes each member through both of its
rows before the next member. The first failure refuses the roster. An admitted roster
then gets ``W-ROS-001`` for every member more members may call than it holds, and
``W-ROS-002`` when ``reachability: all`` gives the entry member no callee
(``launcher/admission/sources.py`` adds ``W-ROS-003`` for a member whose source in the
project differs from what is installed).

In order: the admitted roster (:class:`AdmittedMember`, :class:`AdmittedRoster`), check
6, checks 7 and 8, check 9, the two warnings, then :func:`admit` and :func:`lock_roster`
(``mur lock``). The names of ``roster_structure.py`` are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.admission.agent_check import missing_requirements, pip_install, python_agent_problem
from launcher.admission.bounds import FormationBounds, formation_bounds
from launcher.admission.install_hint import install_fix
from launcher.admission.lock import LockPin, read_lock, write_lock
from launcher.admission.manifest import Manifest
from launcher.admission.restart_policy import RestartPolicy, restart_policy
from launcher.admission.roster_structure import (
    ROSTER_FILE,
    MemberSpec,
    RosterStructure,
    Rule,
    check_structure,
    parse_roster,
    read_roster,
    read_roster_text,
)
from launcher.admission.store import (
    InstalledArtifact,
    StoreKind,
    check_pin,
    installed_anywhere,
    locate,
    open_installed,
)
from launcher.diagnostics import Diagnostic, DiagnosticError, diagnostic
from launcher.home.paths import global_store, project_store

# --- Admission (checks 6-8 and the capacity warning) -------------------------------------

@dataclass(frozen=True, slots=True)
class AdmittedMember:
    """A member bound to the artifact admission found (``artifact``) and its sha256."""

    name: str
    capsule: str
    version: str
    entry: bool
    sha256: str
    artifact: Path
    manifest: Manifest
    store: StoreKind
    index: int
    #: Whether the launcher starts it again when it fails (docs/restarts.md).
    restart: RestartPolicy = field(default_factory=RestartPolicy)

    def field(self, key: str | None = None) -> str:
        return f"members[{self.index}]" + (f".{key}" if key else "")


@dataclass(frozen=True)
class AdmittedRoster:
    """An admitted roster: members in roster order, the edges, and the warnings."""

    project_dir: Path
    members: tuple[AdmittedMember, ...]
    edges: frozenset[tuple[str, str]]
    warnings: list[Diagnostic] = field(default_factory=list)
    #: Version 2's bounds along the edges (empty for version 1; docs/bounds.md).
    bounds: FormationBounds = field(default_factory=FormationBounds)

    @property
    def entry(self) -> AdmittedMember:
        return next(member for member in self.members if member.entry)

    @property
    def peers(self) -> tuple[AdmittedMember, ...]:
        """Every member except the entry member, in roster order."""
        return tuple(member for member in self.members if not member.entry)

    def member(self, name: str) -> AdmittedMember:
        for member in self.members:
            if member.name == name:
                return member
        raise KeyError(name)

    def callees(self, name: str) -> list[str]:
        """The members ``name`` may call, in roster order."""
        return [member.name for member in self.members if (name, member.name) in self.edges]

    def callers(self, name: str) -> list[str]:
        """The members that may call ``name``, in roster order."""
        return [member.name for member in self.members if (member.name, name) in self.edges]

    def ordered_edges(self) -> list[tuple[str, str]]:
        """The edges, callers in roster order and each caller's callees in roster order."""
        return [(member.name, callee) for member in self.members
                for callee in self.callees(member.name)]

    def to_json(self) -> dict[str, Any]:
        return {
            "admitted": True,
            "project_dir": str(self.project_dir),
            "entry": self.entry.name,
            "members": [{"name": m.name, "capsule": m.capsule, "version": m.version,
                         "entry": m.entry, "sha256": m.sha256, "artifact": str(m.artifact),
                         "store": m.store, "callees": self.callees(m.name),
                         "restart": m.restart.to_json()}
                        for m in self.members],
            "edges": [{"from": caller, "to": callee} for caller, callee in self.ordered_edges()],
            "warnings": [warning.to_json() for warning in self.warnings],
            "bounds": self.bounds.to_json(),
        }


def _bind_member(project_dir: Path, member: MemberSpec, file: str) -> AdmittedMember:
    """Check 6, first row: the member is installed at its version and its manifest parses."""
    found = locate(project_dir, member.capsule, member.version)
    if found is None:
        raise DiagnosticError(
            "E-ROS-007", member.field(), file=file, field=member.field(), member=member.name,
            problem=f"{member.capsule} {member.version} is not installed in the project store "
                    f"({project_store(project_dir)}) or the global store ({global_store()})",
            fix=install_fix(project_dir, member.capsule, member.version, roster=True,
                            installed=installed_anywhere(project_dir)))
    try:
        artifact = open_installed(found[0], member.capsule, member.version, found[1])
    except DiagnosticError as inner:
        raise DiagnosticError(
            "E-ROS-007", member.field(), file=file, field=member.field(), member=member.name,
            problem=f"{member.capsule} {member.version} in the {found[1]} store does not open: "
                    f"{inner.code}: {inner.diagnostic.message}",
            fix=inner.diagnostic.hint) from None
    return AdmittedMember(name=member.name, capsule=member.capsule, version=member.version,
                          entry=member.entry, sha256=artifact.sha256, artifact=artifact.path,
                          manifest=artifact.manifest, store=artifact.store, index=member.index,
                          restart=restart_policy(member, artifact.manifest))


def _bind_members(project_dir: Path, roster: RosterStructure, *, honour_lock: bool
                  ) -> tuple[AdmittedMember, ...]:
    """Check 6: each member through both rows (installed; lock agrees) before the next."""
    pins: dict[str, LockPin] | None = None
    lock_read = False
    bound = []
    for spec in roster.members:
        member = _bind_member(project_dir, spec, roster.file)
        if honour_lock:
            if not lock_read:  # read only once a member needs it, so faults keep their order
                pins, lock_read = read_lock(project_dir), True
            if pins:
                _check_member_pin(project_dir, pins, member)
        bound.append(member)
    return tuple(bound)


def _check_member_pin(project_dir: Path, pins: dict[str, LockPin],
                      member: AdmittedMember) -> None:
    check_pin(project_dir, pins, InstalledArtifact(
        capsule=member.capsule, version=member.version, path=member.artifact,
        sha256=member.sha256, manifest=member.manifest, store=member.store),
        subject=f"member `{member.name}`", path=member.field("version"))


def _edges(roster: RosterStructure, members: tuple[AdmittedMember, ...]
           ) -> frozenset[tuple[str, str]]:
    if roster.reachability == "all":
        return frozenset((caller.name, callee.name) for caller in members for callee in members
                         if caller.name != callee.name and not callee.entry
                         and caller.manifest.serves_peers and callee.manifest.serves_peers)
    return frozenset((rule.caller, callee) for rule in roster.rules for callee in rule.callees)


def _callees_serve_peers(roster: RosterStructure, members: tuple[AdmittedMember, ...]) -> None:
    """Check 7, members in roster order."""
    for member in members:
        if member.manifest.serves_peers:
            continue
        for rule, position, callee in roster.rule_targets():
            if callee == member.name:
                path = f"reachability[{rule.index}].to[{position}]"
                raise DiagnosticError("E-ROS-005", path, file=roster.file, field=path,
                                      caller=rule.caller, member=member.name,
                                      capsule=member.capsule, version=member.version)


def _doors_authenticate(roster: RosterStructure, members: tuple[AdmittedMember, ...],
                        edges: frozenset[tuple[str, str]]) -> None:
    """Check 8, members in roster order."""
    if not edges:
        return
    for member in members:
        if not member.manifest.authenticated:
            raise DiagnosticError("E-ROS-006", member.field(), file=roster.file,
                                  field=member.field(), member=member.name,
                                  capsule=member.capsule, version=member.version)


def _agents_can_run(roster: RosterStructure, members: tuple[AdmittedMember, ...]) -> None:
    """``E-ROS-011``, then ``E-ROS-010``, after the roster's own checks, members in roster
    order: what ``agent.requires`` names is installed, and each ``python`` agent compiles
    and defines its async function (no agent code runs)."""
    for member in members:
        requires = member.manifest.agent.requires
        missing = missing_requirements(requires)
        if missing:
            raise DiagnosticError("E-ROS-011", member.field(), file=roster.file,
                                  field=member.field(), capsule=member.capsule,
                                  version=member.version, missing=", ".join(missing),
                                  install=pip_install(requires))
        entry = member.manifest.agent.python
        if entry is None:
            continue
        problem = python_agent_problem(member.artifact, entry)
        if problem is not None:
            raise DiagnosticError("E-ROS-010", member.field(), file=roster.file,
                                  field=member.field(), capsule=member.capsule,
                                  version=member.version, entry=entry, problem=problem)


def _capacity_warnings(roster: AdmittedRoster, file: str) -> list[Diagnostic]:
    warnings = []
    for member in roster.members:
        callers = roster.callers(member.name)
        lifecycle = member.manifest.lifecycle
        if len(callers) <= lifecycle.holds:
            continue
        holds = f"{lifecycle.holds} task{'s' if lifecycle.holds != 1 else ''}"
        warnings.append(diagnostic(
            "W-ROS-001", member.field(), file=file, field=member.field(),
            callers=len(callers), member=member.name,
            names=", ".join(f"`{name}`" for name in callers), holds=holds,
            concurrency=lifecycle.concurrency, queue_depth=lifecycle.queue_depth,
            needed=len(callers) - lifecycle.concurrency, capsule=member.capsule))
    return warnings


def _entry_warnings(roster: RosterStructure, admitted: AdmittedRoster) -> list[Diagnostic]:
    """``W-ROS-002``: ``reachability: all`` that gives the entry member no callee."""
    entry = next((member for member in admitted.members if member.entry), None)
    if (roster.reachability != "all" or entry is None or len(admitted.members) < 2
            or any(caller == entry.name for caller, _ in admitted.edges)):
        return []
    rules = f"write rules instead, such as `reachability: [{{from: {entry.name}, to: [...]}}]`"
    if not entry.manifest.serves_peers:
        why = (f"its capsule {entry.capsule} does not set `exports.peer_tasks.accept: true`, "
               "and under `all` only members that serve peers call each other")
        fix = (f"set `exports.peer_tasks.accept: true` in the murmur.yaml of {entry.capsule} "
               f"(then pack and install it again), or {rules}")
    else:
        why = "no other member serves peers (`exports.peer_tasks.accept: true`)"
        fix = f"let the members it should call serve peers, or {rules}"
    return [diagnostic("W-ROS-002", "reachability", file=roster.file, field="reachability",
                       entry=entry.name, why=why, fix=fix)]


def admit(project_dir: Path) -> AdmittedRoster:
    """Admit ``<project_dir>/roster.yaml`` or refuse it with exactly one
    :class:`DiagnosticError`. Admission never writes ``murmur.lock``."""
    project = Path(project_dir).resolve()
    roster = read_roster(project)
    members = _bind_members(project, roster, honour_lock=True)
    _callees_serve_peers(roster, members)
    edges = _edges(roster, members)
    bounds = formation_bounds(roster, members)
    _doors_authenticate(roster, members, edges)
    _agents_can_run(roster, members)
    admitted = AdmittedRoster(project_dir=project, members=members, edges=edges,
                              bounds=bounds)
    admitted.warnings.extend(_capacity_warnings(admitted, roster.file))
    admitted.warnings.extend(_entry_warnings(roster, admitted))
    return admitted


def lock_roster(project_dir: Path) -> tuple[Path, dict[str, LockPin]]:
    """``mur lock``: pin each member's capsule at what it resolves to now, ignoring the
    current lock, and write ``murmur.lock`` with exactly those pins.

    Refuses (``E-REG-006``) members running one capsule at two versions.
    """
    project = Path(project_dir).resolve()
    roster = read_roster(project)
    members = _bind_members(project, roster, honour_lock=False)
    pins: dict[str, LockPin] = {}
    pinned_by: dict[str, AdmittedMember] = {}
    for member in members:
        earlier = pinned_by.get(member.capsule)
        if earlier is not None and earlier.version != member.version:
            raise DiagnosticError("E-REG-006", member.field("version"), file=roster.file,
                                  first=earlier.name, second=member.name,
                                  capsule=member.capsule, first_version=earlier.version,
                                  second_version=member.version)
        pinned_by[member.capsule] = member
        pins[member.capsule] = LockPin(version=member.version, sha256=member.sha256)
    return write_lock(project, pins), pins


__all__ = ["ROSTER_FILE", "AdmittedMember", "AdmittedRoster", "MemberSpec", "RosterStructure",
           "Rule", "admit", "check_structure", "lock_roster", "parse_roster", "read_roster",
           "read_roster_text"]
