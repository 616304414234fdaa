"""What the launcher writes on its own stderr and stdout: a line, a diagnostic, the
formation line, the entry member's result.

Nobody may read them any more (the terminal hung up, the pipe was closed): a write that
fails never stops the launcher from ending its formation. In order: a line on stderr, a
diagnostic on stderr, the formation line (``--json`` on stdout, else the table on
stderr), then the entry member's stdout after its readiness line, copied to ours; last,
with ``--json``, a launch that failed before its formation line: the one JSON failure
object on stdout (:func:`show_failure`), made of the first error said.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from launcher.diagnostics import Diagnostic, emit, failure_json
from launcher.formation.output import render_table


class _Said:
    """What this launch has said that ``--json`` may have to repeat as its failure."""

    first_error: Diagnostic | str | None = None
    formation_line_shown = False


def begin() -> None:
    """A new launch (in-process callers run several): nothing said yet."""
    _Said.first_error = None
    _Said.formation_line_shown = False


def say(text: str) -> None:
    """One line on stderr. A stderr nobody reads any more (the terminal hung up) never
    stops the launcher from ending its formation."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def refuse(text: str) -> None:
    """A refusal that is no diagnostic (a usage error), said as ``mur run: <text>``."""
    if _Said.first_error is None:
        _Said.first_error = text
    say(f"mur run: {text}")


def report(diag: Diagnostic) -> None:
    """``diag`` on stderr, rendered."""
    if diag.severity == "error" and _Said.first_error is None:
        _Said.first_error = diag
    with contextlib.suppress(OSError, ValueError):
        emit(diag, sys.stderr)


def show_failure(exit_status: int) -> None:
    """With ``--json``, a launch that ends with ``exit_status`` before its formation line
    was shown: the one failure object on stdout (nothing when the line was shown: stdout
    then holds the line and the entry member's result)."""
    error = _Said.first_error
    if _Said.formation_line_shown or exit_status == 0:
        return
    shaped = failure_json("mur run", exit_status, error if error is not None
                          else "the launch failed (its reason is on stderr)")
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(shaped) + "\n")
        sys.stdout.flush()


def show_formation_line(line: dict[str, Any], *, json_mode: bool) -> None:
    """The formation line: one JSON object on stdout with ``--json``, else its table on
    stderr (so that with ``--task`` stdout holds the entry member's result alone)."""
    _Said.formation_line_shown = True
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
