"""What a gateway member's door knows of the tasks its upstream runs: :class:`KnownTask`
(one task reported to a caller, with the last state and Task the door saw), the one
task a request may record (:class:`Claim`), and how a request names a task
(:func:`task_id_of`). The relay (:mod:`gateway.relay.tasks`) keeps them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import IDENTIFIER_LIMIT
from gateway.caller import Caller
from gateway.protocol import TERMINAL_STATES

__all__ = ["TASK_NOT_FOUND", "Claim", "KnownTask", "task_id_of"]

#: The code of the one answer a task the door or its upstream does not know gets.
TASK_NOT_FOUND: Final = -32001

if TYPE_CHECKING:
    from gateway.auth.edge_limits import EdgeCall


@dataclass(slots=True)
class KnownTask:
    """One task the upstream reported to a caller of this door."""

    id: str
    owner: str
    context_id: str
    state: str
    updated_ns: int
    #: The last Task the door saw of it (None until it saw one whole).
    snapshot: dict[str, Any] | None = None
    weight: int = 0
    #: Forgotten by the upstream (GetTask said -32001): no longer live, not followed.
    lost: bool = False
    #: Whether a ``task_state`` record was written for it yet.
    reported: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: The bounded member call that started it (gateway.auth.edge_limits), told when it
    #: ends, and its depth (0: an operator's or a client's task).
    edge: EdgeCall | None = None
    depth: int = 0

    @property
    def live(self) -> bool:
        return not self.lost and self.state not in TERMINAL_STATES


def task_id_of(params: dict[str, Any]) -> str:
    task_id = params.get("id")
    if not (type(task_id) is str and task_id and len(task_id) <= IDENTIFIER_LIMIT):
        raise RpcError("INVALID_PARAMS", f"id: a task id of 1 to {IDENTIFIER_LIMIT} "
                                         "characters is required")
    return task_id


@dataclass(slots=True)
class Claim:
    """What one request may record: the first task its answer names when it is a new
    message (``starts``), else nothing new; ``ignored`` counts the other ids named."""

    caller: Caller
    starts: bool
    task_id: str | None = None
    ignored: int = 0
