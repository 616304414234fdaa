"""What a member's own runtime bounds on its way out (roster version 2, docs/bounds.md).

In order: :func:`starts_task`, whether a request to a member starts a task there (the
calls a limit counts: ``SendMessage`` and ``SendStreamingMessage``, on either binding,
read as the callee's door will read them); :class:`CallBounds`, the member's
``limits.calls`` (spent before any connection opens, :class:`CallLimitReached` past it)
and the depth its calls carry (``x-murmur-call-depth``: the calling task's depth plus
one, stamped on every call to a member; a request whose task is unknown, as through the
forward proxy, carries the deepest live task's, the conservative choice).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import httpx

from gateway.a2a.rest_routes import match_rest
from gateway.proxy.proxy_errors import CallLimitReached

__all__ = ["CallBounds", "DepthOf", "starts_task"]

_STARTING: Final = frozenset({"SendMessage", "SendStreamingMessage"})
#: ``depth_of(task_id)``: the depth of the calls a task makes (its own depth plus one);
#: ``None`` for a request whose task is unknown.
DepthOf = Callable[[str | None], int]


def starts_task(method: str, path: str, body: bytes) -> bool:
    """Whether a request (to a member's door: its method, its URL's path and its body)
    starts a task there."""
    if method != "POST":
        return False
    if path.strip("/") == "":                       # JSON-RPC: the method is in the body
        try:
            document = json.loads(body)
        except ValueError:
            return False                            # the door refuses it, unstarted
        return isinstance(document, dict) and document.get("method") in _STARTING
    match = match_rest("POST", path)
    return match is not None and match.route is not None and match.route.method in _STARTING


class CallBounds:
    """A member's ``limits.calls`` and the depth of its calls (see the module text)."""

    __slots__ = ("_calls", "_depth_of", "_on_limit", "made")

    def __init__(self, *, calls: int | None = None, depth_of: DepthOf | None = None,
                 on_limit: Callable[[int], None] | None = None) -> None:
        self._calls = calls
        self._depth_of = depth_of
        #: ``on_limit(calls)``: a call refused at the limit (the trace, the metrics).
        self._on_limit = on_limit
        #: Task-starting calls made so far.
        self.made = 0

    def spend(self, method: str, path: str, body: bytes,
              request: httpx.Request | None = None) -> None:
        """Count a call that starts a task; CallLimitReached (naming ``request``, when
        there is one) once ``calls`` were made."""
        if self._calls is None or not starts_task(method, path, body):
            return
        if self.made >= self._calls:
            if self._on_limit is not None:
                self._on_limit(self._calls)
            raise CallLimitReached(self._calls, request=request)
        self.made += 1

    def depth(self, task_id: str | None) -> bytes | None:
        """The ``x-murmur-call-depth`` value of a call made for ``task_id``."""
        if self._depth_of is None:
            return None
        return str(self._depth_of(task_id)).encode("ascii")
