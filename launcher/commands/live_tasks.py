"""The tasks a running session holds now, by state, for ``mur ps``.

Read from the session's trace, which every state change reaches before the door
answers anyone about it: each ``task_state`` record sets its task's state, a terminal
state removes the task. What is left are the live tasks (submitted, working, waiting for
input or auth). No door is asked, so ``mur ps`` needs no token and never waits on a busy
member.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from gateway.protocol import TERMINAL_STATES
from launcher.home.records import TRACE_FILE
from launcher.home.trace import read_trace

__all__ = ["live_tasks", "render_tasks"]


def live_tasks(records_dir: str | None) -> dict[str, Any]:
    """``{"live": N, "states": {state: count}}`` of the session whose records folder is
    ``records_dir`` (none when its trace cannot be read yet)."""
    states: dict[str, str] = {}
    if records_dir:
        try:
            records = read_trace(Path(records_dir) / TRACE_FILE)
        except (OSError, ValueError):
            records = []
        for record in records:
            if record.get("event") != "task_state":
                continue
            task_id, state = record.get("task_id"), record.get("state")
            if not isinstance(task_id, str) or not isinstance(state, str):
                continue
            if state in TERMINAL_STATES:
                states.pop(task_id, None)
            else:
                states[task_id] = state
    counts = Counter(states.values())
    return {"live": len(states), "states": dict(sorted(counts.items()))}


def render_tasks(tasks: dict[str, Any]) -> str:
    """``0``, or ``3 (2 working, 1 input-required)``."""
    if not tasks["live"]:
        return "0"
    parts = ", ".join(f"{count} {state.removeprefix('TASK_STATE_').lower().replace('_', '-')}"
                      for state, count in tasks["states"].items())
    return f"{tasks['live']} ({parts})"
