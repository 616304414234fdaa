"""What the launcher writes on its own stderr and stdout: a line, a diagnostic, the
formation line, the entry member's result.

Nobody may read them any more (the terminal hung up, the pipe was closed): a write that
fails never stops the launcher from ending its formation. In order: a line on stderr, a
diagnostic on stderr, the formation line (``--json`` on stdout, else the table on
stderr), then the entry member's stdout after its readiness line, copied to ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from launcher.diagnostics import Diagnostic, emit
from launcher.formation.output import render_table


def say(text: str) -> None:
    """One line on stderr. A stderr nobody reads any more (the terminal hung up) never
    stops the launcher from ending its formation."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def report(diag: Diagnostic) -> None:
    """``diag`` on stderr, rendered."""
    with contextlib.suppress(OSError, ValueError):
        emit(diag, sys.stderr)


def show_formation_line(line: dict[str, Any], *, json_mode: bool) -> None:
    """The formation line: one JSON object on stdout with ``--json``, else its table on
    stderr (so that with ``--task`` stdout holds the entry member's result alone)."""
    stream, text = ((sys.stdout, json.dumps(line) + "\n") if json_mode
                    else (sys.stderr, render_table(line)))
    with contextlib.suppress(OSError, ValueError):  # nobody reads it: run anyway
        stream.write(text)
        stream.flush()


async def copy_result(reader: asyncio.StreamReader) -> None:
    """The entry member's stdout after its readiness line: its result."""
    out = sys.stdout.buffer
    writable = True
    while chunk := await reader.read(65536):
        if not writable:
            continue
        try:
            out.write(chunk)
            out.flush()
        except (OSError, ValueError):
            writable = False  # nobody reads our stdout any more; keep draining
