"""The member's own log, ``logs/member.log`` in its records directory: every warning and
error of the runtime with its whole traceback (an agent's exception is one: the task's
status message keeps only the exception's text), one entry after another, tokens
redacted, the file owner-only (0600). Stderr keeps its one line per entry, with no
traceback (no traceback reaches a user's terminal).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.redaction import redact
from launcher.home.trace import timestamp

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RedactingFormatter(logging.Formatter):
    """The whole entry, traceback included, tokens redacted. The traceback is formatted
    afresh: the stderr handler caches its one-line form on the record first. The time is
    UTC as the trace and the output log write it, so ``mur logs`` can merge the three."""

    def formatTime(self, record: logging.LogRecord,  # noqa: N802 - logging's name
                   datefmt: str | None = None) -> str:
        return timestamp(datetime.fromtimestamp(record.created, UTC))

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        # Agent code runs in the agent process: its own traceback came over the wire.
        agent_traceback = getattr(ei[1], "agent_traceback", "")
        return str(agent_traceback) if agent_traceback else super().formatException(ei)

    def format(self, record: logging.LogRecord) -> str:
        cached = record.exc_text
        record.exc_text = None
        try:
            return redact(super().format(record))
        finally:
            record.exc_text = cached


def open_member_log(path: Path) -> logging.Handler:
    """Send the root logger's warnings and errors to ``path`` too; the handler (the
    caller closes it when the session ends)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.close(fd)  # created owner-only before logging opens it
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setLevel(logging.WARNING)
    formatter = _RedactingFormatter(FORMAT)
    handler.setFormatter(formatter)
    logging.getLogger().addHandler(handler)
    return handler


def close_member_log(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()
