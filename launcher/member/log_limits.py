"""Logs a flood cannot amplify: :class:`RateLimit`, a logging filter that lets a few
lines of one kind through per window and then says how many it held back.

In order: the filter (its windows, one per kind of line, a kind being the line's
message template); :meth:`RateLimit.flush`, which the door's server calls at each tick
to report the windows that ended with lines held back; :func:`limited_logs`, the
filters one server keeps on "uvicorn.error" and "asyncio" while it serves.

A held-back line costs a dictionary look-up: nothing is formatted. The count is logged
at the level of the first line of its window, with the template (code's own constant
text, never a caller's bytes) so an operator knows what was held back.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

#: Kinds of line one filter keeps windows for; any further kind shares one window.
_MAX_KINDS = 32
_OTHER = "(other lines)"
_SUMMARY = "murmur_log_summary"  # set on the count's own record, which always passes
#: The line asyncio logs at each failed accept (EMFILE, ENFILE, ENOBUFS, ENOMEM).
ACCEPT_ERROR = "socket.accept() out of system resource"


@dataclass
class _Window:
    start: float
    level: int
    passed: int = 0
    held: int = 0


class RateLimit(logging.Filter):
    """On ``logger``: ``lines`` lines of each kind per ``seconds``; with ``prefix``, only
    the lines whose message starts with it are limited (all of them one kind)."""

    def __init__(self, logger: logging.Logger, *, lines: int, seconds: float,
                 prefix: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._logger = logger
        self._lines = lines
        self._seconds = seconds
        self._prefix = prefix
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _SUMMARY, False):
            return True
        kind = self._kind(record)
        if kind is None:
            return True
        now = self._clock()
        window = self._windows.get(kind)
        if window is None or now - window.start >= self._seconds:
            if window is not None:
                self._report(kind, window)
            window = self._windows[kind] = _Window(now, record.levelno)
        if window.passed < self._lines:
            window.passed += 1
            return True
        window.held += 1
        return False

    def _kind(self, record: logging.LogRecord) -> str | None:
        msg = record.msg
        if self._prefix is not None:
            return self._prefix if isinstance(msg, str) and msg.startswith(self._prefix) \
                else None
        kind = msg if isinstance(msg, str) else type(msg).__name__
        if kind not in self._windows and len(self._windows) >= _MAX_KINDS:
            return _OTHER
        return kind

    def flush(self, *, every: bool = False) -> None:
        """Report and forget the windows that have ended (``every``: all of them)."""
        now = self._clock()
        for kind, window in list(self._windows.items()):
            if every or now - window.start >= self._seconds:
                del self._windows[kind]
                self._report(kind, window)

    def _report(self, kind: str, window: _Window) -> None:
        if window.held:
            self._logger.log(window.level, "%d more lines like %r were not logged in %g s.",
                             window.held, kind[:80], self._seconds,
                             extra={_SUMMARY: True})


@contextlib.contextmanager
def limited_logs(*, lines: int, accept_lines: int, seconds: float) -> Iterator[
        list[RateLimit]]:
    """While the block runs: "uvicorn.error" (the server's own warnings: invalid
    requests, upgrades, the door's limits) and asyncio's accept errors rate-limited."""
    server = logging.getLogger("uvicorn.error")
    loop = logging.getLogger("asyncio")
    limits = [(server, RateLimit(server, lines=lines, seconds=seconds)),
              (loop, RateLimit(loop, lines=accept_lines, seconds=seconds,
                               prefix=ACCEPT_ERROR))]
    for logger, limit in limits:
        logger.addFilter(limit)
    try:
        yield [limit for _, limit in limits]
    finally:
        for logger, limit in limits:
            logger.removeFilter(limit)
            limit.flush(every=True)
