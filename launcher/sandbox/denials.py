"""What the sandbox denied a confined program, read from the program's own stderr: a
gateway upstream that dies before it serves its card is told apart from one that failed
on its own, and its ``E-RUN-049`` names the path and how to grant it (docs/isolation.md).

In this order: :class:`StderrTail` (the program's stderr copied on to the runtime's as it
comes, line by line, the last lines kept), :func:`denied_path` (the path a refusal names,
in the words Python, Node.js and the shells use for ``EACCES``), :func:`grant_hint` (the
folder to add to ``capabilities.filesystem.read``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

__all__ = ["StderrTail", "denied_path", "grant_hint"]

#: Lines kept, and the longest line kept whole (a traceback's last lines name the path).
TAIL_LINES: Final = 40
MAX_LINE: Final = 4096
_DENIALS: Final = (
    # Python: PermissionError: [Errno 13] Permission denied: '/x/venv/pyvenv.cfg'
    re.compile(r"\[Errno 13\] Permission denied: '(/[^']+)'"),
    # Node.js: Error: EACCES: permission denied, open '/x/y'
    re.compile(r"EACCES: permission denied, \w+ '(/[^']+)'"),
    # sh, bash, dash: /x/y: Permission denied   (also "sh: 1: /x/y: Permission denied")
    re.compile(r"(/[^\s:'\"]+): Permission denied"),
)


class StderrTail:
    """A program's stderr copied to ``sink`` (a file descriptor) as each line comes, its
    last :data:`TAIL_LINES` lines kept for :func:`denied_path`."""

    def __init__(self, sink: int, keep: Callable[[bytes], None] | None = None) -> None:
        self.sink = sink
        #: Told of each line too (the session's output log).
        self.keep = keep
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self._task: asyncio.Task[None] | None = None

    def follow(self, stream: asyncio.StreamReader) -> None:
        self._task = asyncio.create_task(self._copy(stream), name="murmur-upstream-stderr")

    async def _copy(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                line = end.partial
            except asyncio.LimitOverrunError as long:
                line = await stream.readexactly(long.consumed)
            if not line:
                return
            with contextlib.suppress(OSError):
                os.write(self.sink, line)
            if self.keep is not None:
                self.keep(line)
            self.lines.append(line[:MAX_LINE].decode("utf-8", "replace").rstrip("\n"))

    async def finish(self, grace: float = 1.0) -> None:
        """Wait (``grace`` seconds at most) for the copy to reach the end of the stream."""
        task = self._task
        if task is None:
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), grace)
        task.cancel()


def denied_path(lines: Iterable[str]) -> str | None:
    """The last path a refusal of the sandbox names in ``lines``, or None."""
    found = None
    for line in lines:
        for pattern in _DENIALS:
            match = pattern.search(line)
            if match:
                found = match.group(1)
                break
    return found


def grant_hint(path: str) -> str:
    """What to add to ``capabilities.filesystem.read`` for ``path``: its folder (a file's
    neighbours are read with it: a package, a model's shards)."""
    return path if os.path.isdir(path) else os.path.dirname(path) or path
