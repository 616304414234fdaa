"""What a version 2 roster bounds for one member, as its channel carries it (docs/bounds.md).

:class:`MemberBounds` is the ``bounds`` of a member's first channel line: the door's part
(:class:`gateway.auth.edge_limits.DoorBounds`: the formation's depth and the limits of the
edges into it, by caller) and the member's own ``calls`` and ``tokens``. Read with
:meth:`MemberBounds.from_wire`, which raises ``ValueError`` naming what is wrong; written
with :meth:`MemberBounds.wire`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.auth.edge_limits import DoorBounds

__all__ = ["MemberBounds"]

_OWN = ("calls", "tokens")


@dataclass(frozen=True, slots=True)
class MemberBounds:
    door: DoorBounds = field(default_factory=DoorBounds)
    #: Member calls this member may make, formation-wide (its runtime counts them).
    calls: int | None = None
    #: Model tokens it may spend, formation-wide (its model driver counts them).
    tokens: int | None = None

    @property
    def depth(self) -> int | None:
        return self.door.depth

    def wire(self) -> dict[str, Any]:
        wire = self.door.wire()
        for key in _OWN:
            value = getattr(self, key)
            if value is not None:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, data: Any) -> MemberBounds:
        if isinstance(data, MemberBounds):
            return data
        if not isinstance(data, Mapping) or set(data) - {"depth", "incoming", *_OWN}:
            raise ValueError("must be an object of depth, incoming, calls and tokens")
        own = {}
        for key in _OWN:
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{key} must be a whole number of at least 1")
            own[key] = value
        return cls(door=DoorBounds.from_wire(data), **own)
