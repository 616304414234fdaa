"""The agent protocol, version 1: a member runtime and its agent process, over one
private ``socketpair`` (docs/agent-protocol.md).

Framing: one JSON object per line (UTF-8, ``\\n``-terminated, at most
:data:`LINE_LIMIT` bytes), each with an ``op``. The runtime speaks first; in order:

1. runtime ``start`` (``v``, the agent, its environment, the forward proxy's URL, the
   confinement); the agent process confines itself, loads the agent, and answers
   ``started`` (``v``, what was confined) or ``start_failed`` (``error``);
2. per task, runtime ``run`` (the task), then ``turn`` for each further turn, ``cancel``
   to cancel it and ``forget`` once it ended; the agent process answers each turn with
   ``returned`` (``result``, and ``turns``: the turns the task has used, for a model
   member its requests, when the agent counts them itself), ``raised`` (``type``,
   ``message``, ``traceback``) or ``cancelled``;
3. meanwhile the agent process asks ``call`` (``id``, ``task_id``, ``method``, ``args``:
   ``status``, ``artifact``, ``input_required``, ``reject``, ``reply``, ``call_member``,
   ``await_call``, ``answers``, ``delegate``, ``trace``: a model member's
   ``model_call``, ``tool_call`` or ``limit_reached`` record) and the runtime answers
   ``answer`` (``id`` with ``value`` or ``error``: ``type``, ``message`` and, for a
   ``CallFailed``, ``member``, ``state``, ``detail``).

The runtime closing its end ends the agent process; the agent process ending (or dying)
fails its running tasks. Nothing on this wire is a credential: the agent process never
receives a token, and the forward proxy's URL carries the proxy's own secret only.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from launcher.errors import LauncherError

VERSION: Final = 1
#: The longest line either side reads: an artifact's bytes travel base64-encoded.
LINE_LIMIT: Final = 64 * 1024 * 1024

# The runtime's messages.
START: Final = "start"
RUN: Final = "run"
TURN: Final = "turn"
CANCEL: Final = "cancel"
FORGET: Final = "forget"
ANSWER: Final = "answer"
# The agent process's messages.
STARTED: Final = "started"
START_FAILED: Final = "start_failed"
RETURNED: Final = "returned"
RAISED: Final = "raised"
CANCELLED: Final = "cancelled"
CALL: Final = "call"

#: What the agent process may ask of its runtime, for one of its tasks.
METHODS: Final = frozenset({"status", "artifact", "input_required", "reject", "reply",
                            "call_member", "await_call", "answers", "delegate",
                            "trace"})
#: The trace records the agent process may ask its runtime to write (a model member's).
TRACE_EVENTS: Final = frozenset({"model_call", "tool_call", "limit_reached"})


class ProtocolError(LauncherError):
    """A line that is not a message of this protocol (the other side is broken)."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None at the end of the stream."""
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError) as exc:
        raise ProtocolError(f"a line longer than {LINE_LIMIT} bytes") from exc
    except ConnectionError:
        return None
    if not line:
        return None
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"a line that is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ProtocolError("a message without an op")
    return message


def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Queue ``message``; a side whose peer is gone learns it from its reader."""
    if not writer.is_closing():
        writer.write(encode(message))
