"""The lines of a session's logs as ``mur logs`` shows them: read, stamped, merged.

In order: :class:`LogLine`, one line with its time, member, session and source; the
files of a session (:func:`session_log_files`: ``logs/member.log``, the runtime's
warnings and errors; ``logs/output.log.1`` then ``logs/output.log``, what its agent and
upstream printed; ``logs/bootstrap.log``, what the runtime said once its launcher was
gone); :class:`LogTail`, one file read on from where it was last read, whole lines
only, each given its time; :func:`in_time_order`, a stable merge of many files' lines.

A line's time is the one its file wrote at its start (``output.log`` on every line,
``member.log`` at each entry); a line without one (a traceback's, ``bootstrap.log``'s)
takes the time of the line before it in its file, or the file's last change when it is
the first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from launcher.home.records import MEMBER_LOG, OUTPUT_LOG
from launcher.home.trace import timestamp

#: The source of the lines of the runtime's own logs.
RUNTIME = "runtime"
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) (.*)", re.DOTALL)
#: An output log line's source and text, after its time.
_OUTPUT_SOURCE = re.compile(r"(agent|upstream) (.*)", re.DOTALL)


@dataclass(frozen=True)
class LogLine:
    #: ISO-8601 UTC with microseconds and a ``Z`` (sorts as text).
    time: str
    member: str
    session: str
    #: ``agent`` or ``upstream`` (what its programs printed) or ``runtime``.
    source: str
    text: str


def session_log_files(logs: Path) -> list[tuple[Path, bool]]:
    """(file, whether it is an output log) of one session's ``logs`` folder, in the
    order they are read; whether or not they exist yet."""
    output = logs / OUTPUT_LOG
    return [(logs / MEMBER_LOG, False), (output.with_name(OUTPUT_LOG + ".1"), True),
            (output, True), (logs / "bootstrap.log", False)]


class LogTail:
    """One log file of one session, read on from where it was last read."""

    def __init__(self, path: Path, *, member: str, session: str, output: bool) -> None:
        self.path = path
        self.member = member
        self.session = session
        self._output = output
        self._offset = 0
        self._pending = b""
        self._last_time = ""

    def lines(self) -> list[LogLine]:
        """The whole lines written since the last call (none when there is no file)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
                changed = os.fstat(handle.fileno()).st_mtime
        except OSError:
            return []
        self._offset += len(data)
        complete, newline, self._pending = (self._pending + data).rpartition(b"\n")
        if not newline:
            return []
        if not self._last_time:
            self._last_time = timestamp(datetime.fromtimestamp(changed, UTC))
        return [self._line(raw) for raw in complete.decode("utf-8", "replace").split("\n")]

    def _line(self, raw: str) -> LogLine:
        source, text = RUNTIME, raw
        stamped = _STAMP.fullmatch(raw)
        if stamped is not None:
            self._last_time, text = stamped.group(1), stamped.group(2)
            found = _OUTPUT_SOURCE.fullmatch(text) if self._output else None
            if found is not None:
                source, text = found.group(1), found.group(2)
        elif self._output:
            source = "agent"
        return LogLine(self._last_time, self.member, self.session, source, text)


def in_time_order(batches: list[list[LogLine]]) -> list[LogLine]:
    """The lines of many files as one list in time order; the lines of one time keep
    the order of ``batches`` and of each file."""
    merged = [line for batch in batches for line in batch]
    merged.sort(key=lambda line: line.time)  # stable: ties keep their order
    return merged
