"""Checks 1-5 of admitting ``roster.yaml``: the roster read and its structure checked,
no store read (docs/admission.md; the table of every check is ``roster.py``'s).

In order: the roster as written (:class:`MemberSpec`, :class:`Rule`,
:class:`RosterStructure`), check 1 (the document has the roster's shape: every field,
its type, nothing else; ``E-ROS-001``), checks 2 to 5 (member names unique,
``E-ROS-003``; exactly one entry member, ``E-ROS-002``; every rule names members,
``E-ROS-004``; no rule calls the entry member, ``E-ROS-008``), then
:func:`check_structure` and reading the roster from text or from its project.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from gateway.auth.edge_limits import APPROVAL_ROOM, APPROVE_QUEUE_DEFAULT, APPROVE_QUEUE_MAX
from launcher.admission.artifacts import capsule_problem
from launcher.admission.manifest_fields import name_problem, version_problem
from launcher.admission.yaml_files import (
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
    suggest,
)
from launcher.diagnostics import DiagnosticError
from launcher.durations import DURATION_FORMS, parse_duration
from launcher.errors import LauncherError

ROSTER_FILE = "roster.yaml"
TOP_KEYS = ("roster_version", "members", "reachability")
MEMBER_KEYS = ("name", "capsule", "version", "entry")
RULE_KEYS = ("from", "to")
#: What ``roster_version: 2`` adds (docs/bounds.md); version 1 refuses each of them.
V2_TOP_KEYS = (*TOP_KEYS, "limits")
V2_MEMBER_KEYS = (*MEMBER_KEYS, "limits", "restart", "restart_limit")
RESTART_KEYS = ("count", "within")
V2_RULE_KEYS = (*RULE_KEYS, "limits", "approve", "approve_timeout", "approve_queue")
DEPTH_KEYS = ("depth",)
MEMBER_LIMIT_KEYS = ("calls", "tokens")
EDGE_LIMIT_KEYS = ("calls", "concurrent", "per_minute")
#: How long a call waits for the operator when its rule names no ``approve_timeout``.
DEFAULT_APPROVE_TIMEOUT = 600

Location = tuple[str | int, ...]


# --- The roster as written ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Bound:
    """One limit as written: its value, and the field it was written at."""

    value: int
    path: str


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """A member as the roster writes it; ``index`` is its place in ``members``.
    ``limits`` (version 2): ``calls`` and ``tokens`` it may spend, formation-wide."""

    name: str
    capsule: str
    version: str
    entry: bool
    index: int
    limits: Mapping[str, Bound] = field(default_factory=dict)
    #: Version 2: ``restart`` (``never`` or ``on-failure``) and ``restart_limit``
    #: (count, seconds), when written; else the capsule's ``lifecycle`` says.
    restart: str | None = None
    restart_limit: tuple[int, int] | None = None

    def field(self, key: str | None = None) -> str:
        return f"members[{self.index}]" + (f".{key}" if key else "")


@dataclass(frozen=True, slots=True)
class Rule:
    """``caller`` may call each of ``callees``; ``index`` is its place in ``reachability``."""

    caller: str
    callees: tuple[str, ...]
    index: int
    #: Version 2: each edge's ``calls``, ``concurrent``, ``per_minute``; approval, and
    #: how many of the caller's calls may wait for it at once (``approve_queue``).
    limits: Mapping[str, Bound] = field(default_factory=dict)
    approve: bool = False
    approve_timeout: int | None = None
    approve_queue: Bound | None = None

    def field(self, key: str | None = None) -> str:
        return f"reachability[{self.index}]" + (f".{key}" if key else "")


@dataclass(frozen=True, slots=True)
class RosterStructure:
    """A roster that passed checks 1-5. ``reachability`` is ``"all"`` or the rules."""

    members: tuple[MemberSpec, ...]
    reachability: Literal["all"] | tuple[Rule, ...]
    file: str = ROSTER_FILE
    version: int = 1
    #: Version 2's ``limits.depth``.
    depth: Bound | None = None

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


# --- Check 1: the roster's shape ---------------------------------------------------------

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


def _keys(version: int, v1: tuple[str, ...], v2: tuple[str, ...], value: Any,
          location: Location) -> tuple[str, ...]:
    """The keys a mapping may hold at ``version``; a version 2 key in a version 1 roster
    is refused naming the version it needs."""
    if version == 1 and isinstance(value, dict):
        for key in value:
            if key in v2 and key not in v1:
                raise _ShapeFault((*location, key), f"`{dotted((*location, key))}` needs "
                                  "`roster_version: 2`",
                                  "write `roster_version: 2` at the top of roster.yaml "
                                  "(docs/bounds.md), or remove the key")
    return v1 if version == 1 else v2


def _limits(value: Any, location: Location, keys: tuple[str, ...],
            example: str) -> dict[str, Bound]:
    """A ``limits`` mapping: each key a whole number (a value below 1 is check 5b's)."""
    fields = _mapping(value, location, keys, "limits", f"write limits such as `{example}`")
    bounds = {}
    for key, number in fields.items():
        at = (*location, key)
        if isinstance(number, bool) or not isinstance(number, int):
            raise _ShapeFault(at, f"`{dotted(at)}` must be a whole number, not "
                              f"{describe_value(number)}", f"write it as `{key}: 10`")
        bounds[key] = Bound(number, dotted(at))
    return bounds


def _member(value: Any, index: int, roster_version: int = 1) -> MemberSpec:
    location: Location = ("members", index)
    keys = _keys(roster_version, MEMBER_KEYS, V2_MEMBER_KEYS, value, location)
    fields = _mapping(value, location, keys, "a member",
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
    limits = _limits(fields["limits"], (*location, "limits"), MEMBER_LIMIT_KEYS,
                     "{calls: 200, tokens: 2000000}") if "limits" in fields else {}
    restart = fields.get("restart")
    if "restart" in fields and restart not in ("never", "on-failure"):
        at = (*location, "restart")
        raise _ShapeFault(at, f"`{dotted(at)}` must be `never` or `on-failure`, not "
                          f"{describe_value(restart)}",
                          "write `restart: on-failure` to have the launcher start the member "
                          "again when it fails")
    return MemberSpec(name=name, capsule=capsule, version=version, entry=entry, index=index,
                      limits=limits, restart=restart,
                      restart_limit=_restart_limit(fields["restart_limit"], location)
                      if "restart_limit" in fields else None)


def _restart_limit(value: Any, location: Location) -> tuple[int, int]:
    """A member's ``restart_limit``: ``{count: 3, within: 10m}`` (both optional)."""
    at = (*location, "restart_limit")
    fields = _mapping(value, at, RESTART_KEYS, "a restart limit",
                      "write it as `{count: 3, within: 10m}`")
    count = fields.get("count", 3)
    if type(count) is not int or not 1 <= count <= 1000:
        raise _ShapeFault((*at, "count"), f"`{dotted((*at, 'count'))}` must be a whole number "
                          f"from 1 to 1000, not {describe_value(count)}",
                          "write `count: 3`")
    try:
        within = parse_duration(fields.get("within", "10m"))
    except ValueError as problem:
        raise _ShapeFault((*at, "within"), f"`{dotted((*at, 'within'))}` {problem}",
                          f"write a duration such as `10m` ({DURATION_FORMS})") from None
    return count, within


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


def _rule(value: Any, index: int, version: int = 1) -> Rule:
    location: Location = ("reachability", index)
    keys = _keys(version, RULE_KEYS, V2_RULE_KEYS, value, location)
    fields = _mapping(value, location, keys, "a rule",
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
    limits = _limits(fields["limits"], (*location, "limits"), EDGE_LIMIT_KEYS,
                     "{calls: 50, concurrent: 2, per_minute: 20}") if "limits" in fields else {}
    approve, timeout = _approval(fields, location)
    return Rule(caller=caller, callees=tuple(callees), index=index, limits=limits,
                approve=approve, approve_timeout=timeout,
                approve_queue=_approve_queue(fields, location, approve))


def _approval(fields: Mapping[str, Any], location: Location) -> tuple[bool, int | None]:
    """A rule's ``approve`` and ``approve_timeout`` (seconds; the default when approved
    and not written)."""
    approve = fields.get("approve", False)
    if not isinstance(approve, bool):
        raise _ShapeFault((*location, "approve"), f"`{dotted((*location, 'approve'))}` must "
                          f"be `true` or `false`, not {describe_value(approve)}",
                          "write `approve: true` to have the operator approve each call")
    if "approve_timeout" not in fields:
        return approve, DEFAULT_APPROVE_TIMEOUT if approve else None
    at = (*location, "approve_timeout")
    if not approve:
        raise _ShapeFault(at, f"`{dotted(at)}` is set but `approve` is not `true`",
                          "add `approve: true` to the rule, or remove `approve_timeout`")
    try:
        return True, parse_duration(fields["approve_timeout"])
    except ValueError as problem:
        raise _ShapeFault(at, f"`{dotted(at)}` {problem}",
                          f"write a duration such as `10m` ({DURATION_FORMS})") from None


def _approve_queue(fields: Mapping[str, Any], location: Location,
                   approve: bool) -> Bound | None:
    """A rule's ``approve_queue``, as written (its range is check 5b's)."""
    if "approve_queue" not in fields:
        return None
    at = (*location, "approve_queue")
    if not approve:
        raise _ShapeFault(at, f"`{dotted(at)}` is set but `approve` is not `true`",
                          "add `approve: true` to the rule, or remove `approve_queue`")
    number = fields["approve_queue"]
    if isinstance(number, bool) or not isinstance(number, int):
        raise _ShapeFault(at, f"`{dotted(at)}` must be a whole number, not "
                          f"{describe_value(number)}", "write it as `approve_queue: 4`")
    return Bound(number, dotted(at))


def _shape(document: Any) -> RosterStructure:
    """Check 1: the document has the roster's shape (every field, its type, nothing else)."""
    if document is None:
        raise _ShapeFault((), "is empty", "write `roster_version: 1` and `members`; "
                          "`mur new --roster DIR` writes a roster that is admitted as written")
    written = document.get("roster_version") if isinstance(document, dict) else None
    version = written if type(written) is int and written in (1, 2) else 1
    top = _mapping(document, (), _keys(version, TOP_KEYS, V2_TOP_KEYS, document, ()),
                   "a roster", "start with `roster_version: 1` and a list of `members`")
    if "roster_version" not in top:
        raise _ShapeFault(("roster_version",), "`roster_version` is required",
                          "add `roster_version: 1`")
    if written is not version:
        raise _ShapeFault(("roster_version",), f"`roster_version` must be 1 or 2, not "
                          f"{describe_value(written)}",
                          "write `roster_version: 1` (the reference's roster), or 2 for "
                          "bounds along the edges (docs/bounds.md)")
    depth = None
    if "limits" in top:
        depth = _limits(top["limits"], ("limits",), DEPTH_KEYS, "{depth: 4}").get("depth")
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
    specs = tuple(_member(value, index, version) for index, value in enumerate(members))
    reachability = top.get("reachability", [])
    if reachability == "all":
        return RosterStructure(members=specs, reachability="all", version=version,
                               depth=depth)
    if not isinstance(reachability, list):
        raise _ShapeFault(("reachability",), f"`reachability` must be `all` or a list of "
                          f"rules, not {describe_value(reachability)}",
                          "write `reachability: all`, or rules such as "
                          "`- {from: planner, to: [coder]}`")
    rules = tuple(_rule(value, index, version) for index, value in enumerate(reachability))
    return RosterStructure(members=specs, reachability=rules, version=version, depth=depth)


# --- Checks 2-5 --------------------------------------------------------------------------

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


def _bounds_can_be_met(roster: RosterStructure, file: str) -> None:
    """Check 5b (version 2): every limit is at least 1, no ``approve_queue`` is past
    :data:`APPROVE_QUEUE_MAX`, and no edge is bounded by two rules."""
    written = [roster.depth] if roster.depth is not None else []
    for member in roster.members:
        written += member.limits.values()
    for rule in roster.rules:
        written += rule.limits.values()
        if rule.approve_queue is not None:
            written.append(rule.approve_queue)
    for bound in written:
        if bound.value < 1:
            raise DiagnosticError("E-ROS-012", bound.path, file=file, field=bound.path,
                                  problem=f"is {bound.value}, a limit no call can meet",
                                  fix="write a limit of at least 1, or remove the key to "
                                      "leave it unbounded")
    for rule in roster.rules:
        queue = rule.approve_queue
        if queue is not None and queue.value > APPROVE_QUEUE_MAX:
            raise DiagnosticError(
                "E-ROS-012", queue.path, file=file, field=queue.path,
                problem=f"is {queue.value}, more of the callee's {APPROVAL_ROOM} approval "
                        f"places than one caller may hold ({APPROVE_QUEUE_MAX}, so the "
                        "others always keep a share)",
                fix=f"write at most `approve_queue: {APPROVE_QUEUE_MAX}`, or remove it for "
                    f"the default {APPROVE_QUEUE_DEFAULT}")
    bounded: dict[tuple[str, str], Rule] = {}
    for rule, position, callee in roster.rule_targets():
        edge = (rule.caller, callee)
        earlier = bounded.get(edge)
        if earlier is not None and (_bounds_edge(rule) or _bounds_edge(earlier)):
            path = f"{rule.field('to')}[{position}]"
            raise DiagnosticError("E-ROS-012", path, file=file, field=path,
                                  problem=f"lists the edge {rule.caller} -> {callee} that "
                                          f"{earlier.field()} lists too, and one of them "
                                          "bounds it",
                                  fix="list each bounded edge in one rule only")
        bounded.setdefault(edge, rule)


def _bounds_edge(rule: Rule) -> bool:
    return bool(rule.limits) or rule.approve


def _entry_never_called(roster: RosterStructure, file: str) -> None:
    """Check 5."""
    entry = roster.entry.name
    for rule, position, callee in roster.rule_targets():
        if callee == entry:
            path = f"reachability[{rule.index}].to[{position}]"
            raise DiagnosticError("E-ROS-008", path, file=file, field=path, member=entry)


# --- Checks 1-5 on a roster --------------------------------------------------------------

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
    roster = replace(roster, file=file)
    _unique_names(roster, file)
    _one_entry(roster, file)
    _rules_name_members(roster, file)
    _entry_never_called(roster, file)
    _bounds_can_be_met(roster, file)
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
