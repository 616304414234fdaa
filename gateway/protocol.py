"""Shared wire names: one definition of every name two parts of the project must agree on.

In this order: the A2A protocol (version, binding, task states and their sets), the
project's A2A extension, header names, the door's route paths and the one function that
normalises a request path for routing, member names, and the environment variable that
tells a member's agent whom it may call.

This module imports only the standard library (``re``, ``enum``), so the lightest parts
(the call-member client, the launcher's readiness probe, the operator commands) can use
it without paying for pydantic or starlette.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

# --------------------------------------------------------------------------------------
# A2A 1.0

#: The protocol version every door speaks and every client of ours sends.
A2A_VERSION: Final = "1.0"
#: The ``protocolBinding`` of the door's JSON-RPC interface on its card.
JSONRPC_BINDING: Final = "JSONRPC"
#: The ``protocolBinding`` of the door's HTTP+JSON (REST) interface on its card.
HTTP_JSON_BINDING: Final = "HTTP+JSON"
#: The gRPC binding (A2A 1.0 section 10), at an address of its own (``host:port``).
GRPC_BINDING: Final = "GRPC"


class TaskState(StrEnum):
    """``TaskState`` of the A2A proto, by its ProtoJSON name."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"


def state_word(state: object) -> str:
    """A task state as people read it: ``TASK_STATE_INPUT_REQUIRED`` is
    ``input-required``; no state at all is ``unknown``."""
    text = str(state or "unknown")
    return text.removeprefix("TASK_STATE_").lower().replace("_", "-")


#: A task in one of these states never changes again.
TERMINAL_STATES: frozenset[str] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
#: A task in one of these states waits for its caller (input or authorization).
INTERRUPTED_STATES: frozenset[str] = frozenset(
    {TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})

#: The A2A extension on a member's card that names the member, its session and its
#: formation (``params``: ``member``, ``sessionId``, ``formationId``).
SESSION_EXTENSION_URI: Final = "urn:murmur:session:v1"

# --------------------------------------------------------------------------------------
# Headers (lower case, as ASGI gives them)

VERSION_HEADER: Final = "a2a-version"
EXTENSIONS_HEADER: Final = "a2a-extensions"
#: Every header a runtime adds or reads starts with this; none is taken from a caller.
RUNTIME_HEADER_PREFIX: Final = "x-murmur-"
ORIGIN_HEADER: Final = "x-murmur-task-origin"
TRUST_HEADER: Final = "x-murmur-task-trust"
#: The depth of a member call (its calling task's depth plus one), stamped by the
#: caller's runtime; an operator's or a client's task is depth 0 (docs/bounds.md).
CALL_DEPTH_HEADER: Final = "x-murmur-call-depth"
#: The metadata key of the status message of a task that waits for the operator's
#: approval (``approve: true`` on its edge): call-member keeps waiting on such a task,
#: where any other ``TASK_STATE_AUTH_REQUIRED`` ends the call (docs/bounds.md).
APPROVAL_METADATA_KEY: Final = "murmurApproval"

# --------------------------------------------------------------------------------------
# The door's routes

CARD_PATH: Final = "/.well-known/agent-card.json"
HEALTH_PATH: Final = "/healthz"
METRICS_PATH: Final = "/metrics"
FILES_PATH: Final = "/resources/files"
FILES_PREFIX: Final = FILES_PATH + "/"
_SLASH_RUNS = re.compile("/{2,}")


def route_path(scope: Mapping[str, Any]) -> str:
    """The path a door routes on: ``root_path`` removed (starlette's rule), runs of ``/``
    collapsed. ``DoorAuth`` judges a request and the door serves it by this one function,
    so no path can be served as something DoorAuth did not check it as."""
    path: str = scope["path"]
    root = scope.get("root_path") or ""
    if root and path.startswith(root) and path[len(root): len(root) + 1] in ("", "/"):
        path = path[len(root):] or "/"
    if "//" in path:
        path = _SLASH_RUNS.sub("/", path)
    return path


# --------------------------------------------------------------------------------------
# Members

#: A roster member name, which is also a capsule name: the text of the pattern, for
#: composing larger patterns and for messages.
MEMBER_NAME_PATTERN: Final = "[a-z][a-z0-9-]{0,31}"
#: Match with ``fullmatch``: ``$`` alone would let a trailing newline through ``match``.
MEMBER_NAME_RE: Final = re.compile(f"^{MEMBER_NAME_PATTERN}$")

#: ``name=http://name.formation.invalid`` pairs, in roster order, for the members an
#: agent may call; absent when it may call nobody.
PEERS_ENV: Final = "MURMUR_FORMATION_PEERS"
#: The URL of a member's forward proxy (``http://murmur:<secret>@127.0.0.1:<port>``), set
#: in an agent process's environment beside ``HTTP_PROXY`` and friends.
PROXY_ENV: Final = "MURMUR_PROXY"
