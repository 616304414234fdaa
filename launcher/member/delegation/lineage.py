"""A session's place in a delegation: who delegated to it and how deep it is.

A child reads its lineage from the variables its parent's runtime set beside the spawner
lifeline (``launcher.spawn.env_names``); a session that holds no spawner lifeline is a
root at depth 0, whatever its environment says. The variables are removed once read, so
no process the agent starts sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from launcher.ids import is_session_id
from launcher.spawn.env_names import (
    DELEGATED_BY_ENV,
    DELEGATION_DEPTH_ENV,
    DELEGATION_MAX_DEPTH_ENV,
    PARENT_SESSION_ENV,
)

#: The variables of a lineage, in the order a parent sets them.
LINEAGE_ENV = (PARENT_SESSION_ENV, DELEGATED_BY_ENV, DELEGATION_DEPTH_ENV,
               DELEGATION_MAX_DEPTH_ENV)
#: The deepest a delegation may ever go, whatever a manifest says.
DEPTH_CEILING = 16


@dataclass(frozen=True)
class Lineage:
    """``depth`` 0 is a session nobody delegated to; ``max_depth`` None: no bound above
    it yet (its own ``spawn.max_depth`` bounds it)."""

    parent_session: str | None = None
    delegated_by: str | None = None
    depth: int = 0
    max_depth: int | None = None

    def bound(self, own_max_depth: int) -> int:
        """The deepest a child of this session may be: its own bound, never deeper than
        any bound above it."""
        if self.max_depth is None:
            return own_max_depth
        return min(own_max_depth, self.max_depth)

    def for_child(self, *, session_id: str, delegated_by: str, own_max_depth: int
                  ) -> dict[str, str]:
        """The variables a child of this session is started with."""
        return {PARENT_SESSION_ENV: session_id, DELEGATED_BY_ENV: delegated_by,
                DELEGATION_DEPTH_ENV: str(self.depth + 1),
                DELEGATION_MAX_DEPTH_ENV: str(self.bound(own_max_depth))}


def read_lineage(environ: Mapping[str, str]) -> Lineage:
    """A child's lineage (call only for a session holding a spawner lifeline); a value
    that is malformed is read as absent, so a child is never deeper than it claims."""
    parent = environ.get(PARENT_SESSION_ENV)
    by = environ.get(DELEGATED_BY_ENV, "")
    return Lineage(parent_session=parent if is_session_id(parent) else None,
                   delegated_by=by[:200] or None,
                   depth=_number(environ.get(DELEGATION_DEPTH_ENV)) or 1,
                   max_depth=_number(environ.get(DELEGATION_MAX_DEPTH_ENV)))


def forget_lineage(environ: MutableMapping[str, str]) -> None:
    for name in LINEAGE_ENV:
        with contextlib.suppress(KeyError):
            del environ[name]


def _number(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return min(int(value), DEPTH_CEILING)
