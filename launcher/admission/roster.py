"""``roster.yaml`` and its admission, in exactly the roster format's order (docs/admission.md).

| Order | Check                                                         | Code      |
|-------|---------------------------------------------------------------|-----------|
| 1     | ``roster.yaml`` reads and has the shape of the Fields table   | E-ROS-001 |
| 2     | Member names are unique                                       | E-ROS-003 |
| 3     | Exactly one member has ``entry: true``                        | E-ROS-002 |
| 4     | Every rule's ``from`` and ``to`` names a member               | E-ROS-004 |
| 5     | No rule lists the entry member in ``to``                      | E-ROS-008 |
| 6     | Each member installed and its manifest parses; lock agrees   | E-ROS-007, E-REG-005 |
| 7     | Every member a rule calls serves peers                        | E-ROS-005 |
| 8     | With any edge, every member's door requires authentication    | E-ROS-006 |
| 9     | ``agent.requires`` installed; each ``python`` agent compiles  | E-ROS-011, E-ROS-010 |

Checks 1-5 (:func:`check_structure`) read no store; check 9 is murmur-door's own, after
the roster format's eight, and runs no agent code (``launcher/admission/agent_check.py``). Check 6
takes each member through both of its rows before the next member. The first failure
refuses the roster. An admitted roster then gets ``W-ROS-001`` for every member more
members may call than it holds, and ``W-ROS-002`` when ``reachability: all`` gives the
entry member no callee (``launcher/admission/sources.py`` adds ``W-ROS-003`` for a member whose
source in the project differs from what is installed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from launcher.admission.agent_check import missing_requirements, pip_install, python_agent_problem
from launcher.admission.manifest import (
    Manifest,
    name_problem,
    version_problem,
)
from launcher.admission.store import (
    InstalledArtifact,
    LockPin,
    StoreKind,
    artifact_name,
    capsule_problem,
    check_pin,
    locate,
    open_installed,
    read_lock,
    write_lock,
)
from launcher.admission.yaml_files import (
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
    suggest,
)
from launcher.diagnostics import Diagnostic, DiagnosticError, diagnostic
from launcher.errors import LauncherError
from launcher.home.paths import global_store, project_store

ROSTER_FILE = "roster.yaml"
TOP_KEYS = ("roster_version", "members", "reachability")
MEMBER_KEYS = ("name", "capsule", "version", "entry")
RULE_KEYS = ("from", "to")

Location = tuple[str | int, ...]


# --- The roster's structure (checks 1-5) --------------------------------------------------

@dataclass(frozen=True, slots=True)
class MemberSpec:
    """A member as the roster writes it; ``index`` is its place in ``members``."""

    name: str
    capsule: str
    version: str
    entry: bool
    index: int

    def field(self, key: str | None = None) -> str:
        return f"members[{self.index}]" + (f".{key}" if key else "")


@dataclass(frozen=True, slots=True)
class Rule:
    """``caller`` may call each of ``callees``; ``index`` is its place in ``reachability``."""

    caller: str
    callees: tuple[str, ...]
    index: int


@dataclass(frozen=True, slots=True)
class RosterStructure:
    """A roster that passed checks 1-5. ``reachability`` is ``"all"`` or the rules."""

    members: tuple[MemberSpec, ...]
    reachability: Literal["all"] | tuple[Rule, ...]
    file: str = ROSTER_FILE

    @property
    def entry(self) -> MemberSpec:
        return next(member for member in self.members if member.entry)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return () if self.reachability == "all" else self.reachability

    def rule_targets(self) -> Iterator[tuple[Rule, int, str]]:
        """Every ``(rule, position in to, callee)`` in document order."""
        for rule in self.rules:
            for position, callee in enumerate(rule.callees):
                yield rule, position, callee


class _ShapeFault(LauncherError):
    def __init__(self, location: Location, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.location, self.problem, self.fix = location, problem, fix


def _present(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A key written with no value (``entry:``) is the same as an absent key."""
    return {key: value for key, value in mapping.items() if value is not None}


def _mapping(value: Any, location: Location, keys: tuple[str, ...], what: str,
             fix: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        subject = f"`{dotted(location)}` must be" if location else "must hold"
        raise _ShapeFault(location, f"{subject} {what}, not {describe_value(value)}", fix)
    for key in value:
        if key not in keys:
            close = suggest(key, keys)
            raise _ShapeFault((*location, key), f"`{dotted((*location, key))}` is not a key "
                              "roster.yaml accepts",
                              f"{close[2:] + ' ' if close else 'remove it; '}the keys of "
                              f"{what} are {', '.join(keys)}")
    return _present(value)


def _text(values: Mapping[str, Any], key: str, location: Location, fix: str) -> str:
    where = dotted((*location, key))
    if key not in values:
        raise _ShapeFault((*location, key), f"`{where}` is required", fix)
    value = values[key]
    if not isinstance(value, str):
        raise _ShapeFault((*location, key), f"`{where}` must be text, not "
                          f"{describe_value(value)}", fix)
    return value


def _member(value: Any, index: int) -> MemberSpec:
    location: Location = ("members", index)
    fields = _mapping(value, location, MEMBER_KEYS, "a member",
                      "write each member as a mapping with `name`, `capsule` and `version`")
    name = _text(fields, "name", location, "give the member a name, such as `coder`")
    problem = name_problem(name)
    if problem is not None:
        raise _ShapeFault((*location, "name"), f"`{dotted((*location, 'name'))}` {problem}",
                          "use lower-case letters, digits and `-`, starting with a letter, at "
                          "most 32 characters")
    capsule = _text(fields, "capsule", location,
                    "name the installed capsule the member runs, such as `local/coder`")
    _check_capsule(capsule, (*location, "capsule"))
    version = _text(fields, "version", location,
                    "give the exact version of the capsule, such as 1.2.0")
    problem = version_problem(version)
    if problem is not None:
        raise _ShapeFault((*location, "version"), f"`{dotted((*location, 'version'))}` "
                          f"{problem}", "give the exact version installed, such as 1.2.0 "
                          "(`mur install` prints it)")
    entry = fields.get("entry", False)
    if not isinstance(entry, bool):
        raise _ShapeFault((*location, "entry"), f"`{dotted((*location, 'entry'))}` must be "
                          f"`true` or `false`, not {describe_value(entry)}",
                          "write `entry: true` on the entry member and leave it out elsewhere")
    return MemberSpec(name=name, capsule=capsule, version=version, entry=entry, index=index)


def _check_capsule(capsule: str, location: Location) -> None:
    problem = capsule_problem(capsule)
    if problem is None:
        return
    if "/" not in capsule:
        raise _ShapeFault(location, f"`{dotted(location)}` is `{capsule}`, a bare name",
                          f"name it with its scope: `local/{capsule}` for a capsule installed "
                          f"from its .mur.zip file, or `<scope>/{capsule}`")
    raise _ShapeFault(location, f"`{dotted(location)}` is `{capsule}`: {problem}",
                      "write `<scope>/<name>`, such as `local/coder`")


def _rule(value: Any, index: int) -> Rule:
    location: Location = ("reachability", index)
    fields = _mapping(value, location, RULE_KEYS, "a rule",
                      "write each rule as `{from: <member>, to: [<member>, ...]}`")
    caller = _text(fields, "from", location, "name the calling member in `from`")
    where = dotted((*location, "to"))
    if "to" not in fields:
        raise _ShapeFault((*location, "to"), f"`{where}` is required",
                          "list the members `from` may call in `to`")
    callees = fields["to"]
    if not isinstance(callees, list):
        raise _ShapeFault((*location, "to"), f"`{where}` must be a list of members, not "
                          f"{describe_value(callees)}",
                          f"write `to: [{callees}]`" if isinstance(callees, str) else
                          "write `to: [<member>, ...]`")
    if not callees:
        raise _ShapeFault((*location, "to"), f"`{where}` must name at least one member",
                          "list a member, or remove the rule")
    for position, callee in enumerate(callees):
        at = (*location, "to", position)
        if not isinstance(callee, str):
            raise _ShapeFault(at, f"`{dotted(at)}` must be a member's name, not "
                              f"{describe_value(callee)}", "write the member's name")
        if callee == caller:
            raise _ShapeFault(at, f"`{dotted(at)}` is `{callee}`, the rule's own `from`",
                              "a member never calls itself: remove it from `to`")
    return Rule(caller=caller, callees=tuple(callees), index=index)


def _shape(document: Any) -> RosterStructure:
    """Check 1: the document has the roster's shape (every field, its type, nothing else)."""
    if document is None:
        raise _ShapeFault((), "is empty", "write `roster_version: 1` and `members`; "
                          "`mur new --roster DIR` writes a roster that is admitted as written")
    top = _mapping(document, (), TOP_KEYS, "a roster",
                   "start with `roster_version: 1` and a list of `members`")
    version = top.get("roster_version")
    if "roster_version" not in top:
        raise _ShapeFault(("roster_version",), "`roster_version` is required",
                          "add `roster_version: 1`")
    if type(version) is not int or version != 1:
        raise _ShapeFault(("roster_version",), f"`roster_version` must be 1, not "
                          f"{describe_value(version)}", "write `roster_version: 1`")
    if "members" not in top:
        raise _ShapeFault(("members",), "`members` is required",
                          "list the formation's members, each with `name`, `capsule` and "
                          "`version`")
    members = top["members"]
    if not isinstance(members, list) or not members:
        raise _ShapeFault(("members",), "`members` must be a list of at least one member, "
                          f"not {describe_value(members) if members != [] else 'an empty list'}",
                          "list the formation's members, each with `name`, `capsule` and "
                          "`version`")
    specs = tuple(_member(value, index) for index, value in enumerate(members))
    reachability = top.get("reachability", [])
    if reachability == "all":
        return RosterStructure(members=specs, reachability="all")
    if not isinstance(reachability, list):
        raise _ShapeFault(("reachability",), f"`reachability` must be `all` or a list of "
                          f"rules, not {describe_value(reachability)}",
                          "write `reachability: all`, or rules such as "
                          "`- {from: planner, to: [coder]}`")
    rules = tuple(_rule(value, index) for index, value in enumerate(reachability))
    return RosterStructure(members=specs, reachability=rules)


def _unique_names(roster: RosterStructure, file: str) -> None:
    """Check 2."""
    first: dict[str, MemberSpec] = {}
    for member in roster.members:
        if member.name in first:
            raise DiagnosticError("E-ROS-003", member.field("name"), file=file,
                                  field=member.field("name"), name=member.name,
                                  first=first[member.name].field())
        first[member.name] = member


def _one_entry(roster: RosterStructure, file: str) -> None:
    """Check 3."""
    entries = [member for member in roster.members if member.entry]
    if len(entries) == 1:
        return
    if not entries:
        raise DiagnosticError("E-ROS-002", "members", file=file, found="no member has")
    names = ", ".join(f"`{member.name}`" for member in entries)
    raise DiagnosticError("E-ROS-002", entries[1].field("entry"), file=file,
                          found=f"{len(entries)} members ({names}) have")


def _rules_name_members(roster: RosterStructure, file: str) -> None:
    """Check 4."""
    names = [member.name for member in roster.members]

    def refuse(path: str, name: str) -> DiagnosticError:
        return DiagnosticError("E-ROS-004", path, file=file, field=path, name=name,
                               members=", ".join(names), suggestion=suggest(name, names))

    for rule in roster.rules:
        if rule.caller not in names:
            raise refuse(f"reachability[{rule.index}].from", rule.caller)
        for position, callee in enumerate(rule.callees):
            if callee not in names:
                raise refuse(f"reachability[{rule.index}].to[{position}]", callee)


def _entry_never_called(roster: RosterStructure, file: str) -> None:
    """Check 5."""
    entry = roster.entry.name
    for rule, position, callee in roster.rule_targets():
        if callee == entry:
            path = f"reachability[{rule.index}].to[{position}]"
            raise DiagnosticError("E-ROS-008", path, file=file, field=path, member=entry)


def check_structure(document: Any, file: str = ROSTER_FILE) -> RosterStructure:
    """Checks 1-5 on a parsed ``roster.yaml`` document: no store is read.

    ``document`` is what :func:`read_roster_text` returns (versions as text). Raises
    :class:`DiagnosticError` with ``E-ROS-001``, ``003``, ``002``, ``004`` or ``008``.
    """
    try:
        roster = _shape(document)
    except _ShapeFault as fault:
        raise DiagnosticError("E-ROS-001", dotted(fault.location) or file, file=file,
                              problem=fault.problem, fix=fault.fix) from None
    roster = RosterStructure(members=roster.members, reachability=roster.reachability,
                             file=file)
    _unique_names(roster, file)
    _one_entry(roster, file)
    _rules_name_members(roster, file)
    _entry_never_called(roster, file)
    return roster


def read_roster_text(text: bytes | str, file: str = ROSTER_FILE) -> Any:
    """The YAML document of a roster, ``members[].version`` kept as its text."""
    try:
        return read_yaml(text, text_paths=(("members", "*", "version"),))
    except YamlFault as fault:
        raise DiagnosticError("E-ROS-001", dotted(fault.location) or file, file=file,
                              problem=fault.problem, fix=fault.fix) from None


def parse_roster(text: bytes | str, file: str = ROSTER_FILE) -> RosterStructure:
    """Checks 1-5 on the text of a roster."""
    return check_structure(read_roster_text(text, file), file)


def read_roster(project_dir: Path) -> RosterStructure:
    """Checks 1-5 on ``<project_dir>/roster.yaml``."""
    path = Path(project_dir) / ROSTER_FILE
    try:
        data = read_text_file(path)
    except FileNotFoundError:
        raise DiagnosticError("E-ROS-001", ROSTER_FILE, file=ROSTER_FILE,
                              problem=f"there is no roster.yaml in {path.parent}",
                              fix="run mur in the roster's project directory or name it with "
                                  "`--project DIR`; `mur new --roster DIR` writes a "
                                  "roster") from None
    except OSError as exc:
        raise DiagnosticError("E-ROS-001", ROSTER_FILE, file=ROSTER_FILE,
                              problem=f"cannot be read ({exc.strerror})",
                              fix="make it a readable file") from None
    return parse_roster(data)


# --- Admission (checks 6-8 and the capacity warning) --------------------------------------

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

    def field(self, key: str | None = None) -> str:
        return f"members[{self.index}]" + (f".{key}" if key else "")


@dataclass(frozen=True)
class AdmittedRoster:
    """An admitted roster: members in roster order, the edges, and the warnings."""

    project_dir: Path
    members: tuple[AdmittedMember, ...]
    edges: frozenset[tuple[str, str]]
    warnings: list[Diagnostic] = field(default_factory=list)

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
                         "store": m.store, "callees": self.callees(m.name)}
                        for m in self.members],
            "edges": [{"from": caller, "to": callee} for caller, callee in self.ordered_edges()],
            "warnings": [warning.to_json() for warning in self.warnings],
        }


def _bind_member(project_dir: Path, member: MemberSpec, file: str) -> AdmittedMember:
    """Check 6, first row: the member is installed at its version and its manifest parses."""
    found = locate(project_dir, member.capsule, member.version)
    if found is None:
        _, name = member.capsule.split("/", 1)
        raise DiagnosticError(
            "E-ROS-007", member.field(), file=file, field=member.field(), member=member.name,
            problem=f"{member.capsule} {member.version} is not installed in the project store "
                    f"({project_store(project_dir)}) or the global store ({global_store()})",
            fix=f"install it with `mur install {artifact_name(name, member.version)}` in the "
                f"project (add `--global` for every project)")
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
                          manifest=artifact.manifest, store=artifact.store, index=member.index)


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
    _doors_authenticate(roster, members, edges)
    _agents_can_run(roster, members)
    admitted = AdmittedRoster(project_dir=project, members=members, edges=edges)
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
