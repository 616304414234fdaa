"""The member's output log, ``logs/output.log`` in its records directory: every line its
own programs print (a ``python`` or ``command`` agent's stdout and stderr, a gateway
member's upstream), kept for ``mur logs`` after the terminal that showed it is gone.

In order: the line format; :class:`OutputLog`, which the runtime's relays hand bytes as
they come (:meth:`OutputLog.take`), cuts them into lines per source, stamps each with the
UTC time it was read, redacts token shapes and appends it; the bound, one rotation:
past :data:`ROTATE_BYTES` the file becomes ``output.log.1`` (an older one is replaced)
and a new one starts, so a member that prints without end keeps its last 2 x 8 MiB and
never fills the disk; :meth:`OutputLog.close`, which writes a partial last line.

Each line is ``<time> <source> <text>``: the time as the trace writes it
(``2026-12-06T02:30:01.123456Z``), the source ``agent`` or ``upstream``, the text with
control characters left as they were printed (``mur logs`` escapes them). A write that
fails (a full disk) is let go: the same lines still reach the launcher's terminal, and
printing must never fail an agent's task.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gateway.redaction import redact
from launcher.home.trace import timestamp

#: The suffix of the file's one older rotation.
ROTATED_SUFFIX = ".1"
#: Past this many bytes the file is rotated.
ROTATE_BYTES = 8 * 1024 * 1024
#: A line longer than this is cut into pieces of this size, each its own line.
MAX_LINE = 64 * 1024
#: The sources a line comes from.
SOURCES = ("agent", "upstream")


class OutputLog:
    """``logs/output.log`` of one session, appended to as its programs print."""

    def __init__(self, path: Path, *, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = path
        self._rotate_bytes = rotate_bytes
        self._pending: dict[str, bytes] = {}
        self._fd = -1
        self._size = 0
        self._open()

    def _open(self) -> None:
        with contextlib.suppress(OSError):
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND
                               | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            self._size = os.fstat(self._fd).st_size

    def take(self, source: str, data: bytes) -> None:
        """``data`` as ``source`` printed it: every whole line in it is written; a
        partial last line waits for the rest (or for :meth:`close`)."""
        data = self._pending.pop(source, b"") + data
        *lines, rest = data.split(b"\n")
        while len(rest) >= MAX_LINE:
            lines.append(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        if rest:
            self._pending[source] = rest
        if lines:
            self._write(source, lines)

    def _write(self, source: str, lines: list[bytes]) -> None:
        if self._fd < 0:
            return
        stamp = timestamp()
        text = "".join(f"{stamp} {source} {redact(line.decode('utf-8', 'replace'))}\n"
                       for line in lines)
        data = text.encode("utf-8")
        if self._size + len(data) > self._rotate_bytes and self._size:
            self._rotate()
        with contextlib.suppress(OSError):
            os.write(self._fd, data)
            self._size += len(data)

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(OSError):
            os.replace(self.path, rotated(self.path))
        self._open()

    def close(self) -> None:
        """Write what waits of a partial line, then close the file."""
        pending, self._pending = self._pending, {}
        for source, rest in pending.items():
            self._write(source, [rest])
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def rotated(path: Path) -> Path:
    """The older rotation of the output log at ``path``."""
    return path.with_name(path.name + ROTATED_SUFFIX)
