"""A version 2 roster's bounds, admitted (docs/bounds.md): what each member is handed.

In order: :class:`FormationBounds` (the formation's depth, each member's own limits,
each bounded edge's limits and approval), built by :func:`formation_bounds` from the
roster's structure once its members are bound, after the check of what only the
manifests can tell (``E-ROS-012``: approval into a member whose door cannot hold a task,
``tokens`` on a member that is not a model); then what one member is handed on its
channel (:meth:`FormationBounds.for_member`), the lines ``mur doctor`` prints, and the
JSON form. A version 1 roster has no bounds: every method answers as for none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.auth.edge_limits import DoorBounds, EdgeLimits
from launcher.admission.roster_structure import RosterStructure
from launcher.diagnostics import DiagnosticError
from launcher.durations import format_duration

if TYPE_CHECKING:
    from launcher.admission.roster import AdmittedMember

__all__ = ["FormationBounds", "formation_bounds"]


@dataclass(frozen=True)
class FormationBounds:
    """The bounds of an admitted roster (all empty for version 1)."""

    version: int = 1
    depth: int | None = None
    #: A member's own ``limits``: ``calls`` and ``tokens``, by member name.
    members: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Each bounded edge's limits and approval, by (caller, callee).
    edges: Mapping[tuple[str, str], EdgeLimits] = field(default_factory=dict)

    def for_member(self, name: str) -> dict[str, Any] | None:
        """The ``bounds`` of ``name``'s first channel line; None when nothing bounds it
        (every version 1 member: its channel line is the reference's)."""
        door = DoorBounds(depth=self.depth, incoming={
            caller: limits for (caller, callee), limits in self.edges.items()
            if callee == name})
        wire = {**door.wire(), **self.members.get(name, {})}
        return wire or None

    def edge(self, caller: str, callee: str) -> EdgeLimits | None:
        return self.edges.get((caller, callee))

    def lines(self) -> list[str]:
        """What ``mur doctor`` prints of them, one line each."""
        lines = []
        if self.depth is not None:
            lines.append(f"limits: depth {self.depth}")
        for name, own in self.members.items():
            lines.append(f"limits {name}: " + ", ".join(
                f"{key} {value}" for key, value in own.items()))
        for (caller, callee), limits in self.edges.items():
            lines.append(f"limits {caller} -> {callee}: {edge_label(limits)}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"roster_version": self.version, "depth": self.depth,
                "members": {name: dict(limits) for name, limits in self.members.items()},
                "edges": [{"from": caller, "to": callee, **limits.wire()}
                          for (caller, callee), limits in self.edges.items()]}


def edge_label(limits: EdgeLimits) -> str:
    """``calls 50, concurrent 2, per_minute 20, approve (10m)``: an edge's bounds, as
    doctor prints them and ``mur graph`` labels the edge (``approve (10m, queue 4)``
    when the edge names its ``approve_queue``)."""
    parts = [f"{key} {value}" for key, value in (
        ("calls", limits.calls), ("concurrent", limits.concurrent),
        ("per_minute", limits.per_minute)) if value is not None]
    if limits.approve:
        timeout = int(limits.approve_timeout or 0)
        queue = "" if limits.approve_queue is None else f", queue {limits.approve_queue}"
        parts.append(f"approve ({format_duration(timeout)}{queue})")
    return ", ".join(parts)


def formation_bounds(roster: RosterStructure,
                     members: tuple[AdmittedMember, ...]) -> FormationBounds:
    """The admitted bounds; ``E-ROS-012`` for a bound the members' manifests cannot
    honour."""
    if roster.version == 1:
        return FormationBounds()
    by_name = {member.name: member for member in members}
    own: dict[str, dict[str, int]] = {}
    for spec in roster.members:
        if not spec.limits:
            continue
        tokens = spec.limits.get("tokens")
        if tokens is not None and by_name[spec.name].manifest.agent.model is None:
            raise DiagnosticError(
                "E-ROS-012", tokens.path, file=roster.file, field=tokens.path,
                problem=f"bounds the tokens of `{spec.name}`, whose capsule "
                        f"{spec.capsule} is not a model member (agent.model)",
                fix="remove `tokens`: only a model member spends tokens (docs/llm.md)")
        own[spec.name] = {key: bound.value for key, bound in spec.limits.items()}
    edges: dict[tuple[str, str], EdgeLimits] = {}
    for rule, position, callee in roster.rule_targets():
        if not rule.limits and not rule.approve:
            continue
        if rule.approve and by_name[callee].manifest.agent.a2a is not None:
            path = f"{rule.field('to')}[{position}]"
            raise DiagnosticError(
                "E-ROS-012", path, file=roster.file, field=path,
                problem=f"asks the operator to approve calls into `{callee}`, a gateway "
                        "member, whose door cannot hold a task: its tasks are its "
                        "upstream's",
                fix=f"move `{callee}` to a rule without `approve`, or put a `python` or "
                    "`model` member in front of it and approve the calls into that one")
        edges[(rule.caller, callee)] = EdgeLimits(
            calls=_value(rule.limits, "calls"), concurrent=_value(rule.limits, "concurrent"),
            per_minute=_value(rule.limits, "per_minute"), approve=rule.approve,
            approve_timeout=None if rule.approve_timeout is None
            else float(rule.approve_timeout),
            approve_queue=None if rule.approve_queue is None else rule.approve_queue.value)
    return FormationBounds(version=2, depth=roster.depth.value if roster.depth else None,
                           members=own, edges=edges)


def _value(limits: Mapping[str, Any], key: str) -> int | None:
    bound = limits.get(key)
    return None if bound is None else int(bound.value)
