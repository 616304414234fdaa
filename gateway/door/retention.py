"""Retention: the ended tasks a door keeps, within a count and a byte budget, the oldest
forgotten first; the same for a local door (:class:`gateway.door.tasks.TaskStore`) and a
gateway member's relay (:class:`gateway.relay.tasks.RelayTasks`).

In this order: :class:`FinishedTasks` (remember an ended task with its weight, weigh it
again when it grows, forget the oldest past either bound), then :func:`json_weight`, how
a task's bytes are estimated, cheaply and once per change.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["FinishedTasks", "json_weight"]

#: json_weight's costs: a dict, each of its entries (key, slot, a short string's header),
#: a list and each of its items; past _LONG_TEXT characters a string is measured.
_DICT_WEIGHT, _ENTRY_WEIGHT, _LIST_WEIGHT, _ITEM_WEIGHT = 64, 80, 56, 8
_LONG_TEXT = 256


class FinishedTasks:
    """Ended tasks still kept, oldest first, each with the bytes it was counted at. Past
    ``max_count`` tasks or ``max_bytes`` bytes the oldest is dropped and ``forget`` is
    called with its id (the owner drops the task itself). A queued or running task is
    never here, so never forgotten."""

    def __init__(self, max_count: int, max_bytes: int, forget: Callable[[str], None]) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._forget = forget
        self._weights: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        """The estimated bytes of the ended tasks kept."""
        return self._bytes

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._weights

    def remember(self, task_id: str, weight: int) -> None:
        """Keep ``task_id``, which just ended; then forget the oldest past the bounds.
        The task that just ended stays even when it alone is over the budget: its caller
        may still read it once; the next task to end pushes it out."""
        weights = self._weights
        if task_id in weights:
            return
        weights[task_id] = weight
        self._bytes += weight
        while len(weights) > 1 and (len(weights) > self.max_count
                                    or self._bytes > self.max_bytes):
            oldest, dropped = weights.popitem(last=False)
            self._bytes -= dropped
            self._forget(oldest)

    def reweigh(self, task_id: str, weight: int) -> None:
        """A kept task now weighs ``weight`` (a relay saw its final Task after it ended)."""
        old = self._weights.get(task_id)
        if old is not None:
            self._bytes += weight - old
            self._weights[task_id] = weight


def json_weight(value: Any) -> int:
    """About how many bytes a JSON-shaped value holds in memory, cheaply: a fixed cost per
    container and entry, plus each string's length (its real size once it is long, so
    that wide characters count fully). It errs high for small values, and is walked with
    a stack, not recursion, so a deeply nested value cannot overflow it."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            total += _DICT_WEIGHT + _ENTRY_WEIGHT * len(item)
            for entry in item.values():
                if type(entry) is str:  # the common leaf, counted without a push
                    total += len(entry) if len(entry) < _LONG_TEXT else sys.getsizeof(entry)
                else:
                    stack.append(entry)
        elif kind is list or kind is tuple:
            total += _LIST_WEIGHT + _ITEM_WEIGHT * len(item)
            stack.extend(item)
        elif kind is str:
            total += _ENTRY_WEIGHT + (len(item) if len(item) < _LONG_TEXT
                                      else sys.getsizeof(item))
        else:
            total += sys.getsizeof(item)
    return total
