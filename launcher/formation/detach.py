"""``mur run --roster --detach``: the launch in the background, its id in the foreground.

In order: the refusals (``--detach`` runs a formation that serves until ``mur stop``, so
not with ``--task``); the launcher started again as a child of its own session (no
terminal: a hang-up or Ctrl-C there never reaches it), its stdin ``/dev/null``, its
stderr (its own lines, the members' forwarded stderr) appended to a log file under
``records/detached/`` and echoed on this command's stderr while it starts (warnings,
the members it still waits for), its stdout a pipe read for one line; that line, the
formation line or a refusal, decides: a formation line renames the log after the formation and
prints the id (``--json``: the formation line with ``detached``, ``launcher_pid`` and
``launcher_log`` added) and ends here with status 0 while the formation runs on; a
refusal prints what the launcher said and exits with the launcher's status.

Nothing here holds a key or a token: the child launcher mints its own, as any launch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from launcher.diagnostics import failure_json
from launcher.formation.members import mur_command
from launcher.home.paths import detached_logs

#: How often the launcher's log is echoed while the formation starts.
ECHO_SECONDS = 0.25
#: The flags a detached launch takes off the child's command line.
_DETACH_FLAGS = ("--detach", "-d")


def detached_log(formation_id: str) -> Path:
    return detached_logs() / f"{formation_id}.log"


def child_argv(argv: Sequence[str]) -> list[str]:
    """The launcher's command line: ``argv`` without ``--detach``, with ``--json``."""
    kept = [arg for arg in argv if arg not in _DETACH_FLAGS]
    return kept if "--json" in kept else [*kept, "--json"]


def detach(args: argparse.Namespace) -> int:
    """Start the launch in the background; the exit status of this command."""
    if args.task is not None:
        return _usage(args, "--detach starts a formation that serves until `mur stop`; send it "
                      "tasks with `mur send FRM TEXT` (--task runs one task in the "
                      "foreground)")
    folder = detached_logs()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    starting = folder / f"starting-{os.getpid()}.log"
    log_fd = os.open(starting, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                     | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        child = subprocess.Popen(
            [*mur_command(os.environ), *child_argv(args.argv)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=log_fd, start_new_session=True, close_fds=True)
    except OSError as exc:
        os.close(log_fd)
        starting.unlink(missing_ok=True)
        return _usage(args, f"the launcher could not be started ({exc.strerror or exc})", 1)
    finally:
        with contextlib.suppress(OSError):
            os.close(log_fd)
    assert child.stdout is not None
    echo = _LogEcho(starting)
    with child.stdout:
        first = _first_line(child.stdout, echo)
    line = _json_object(first)
    if line is not None and line.get("event") == "formation":
        return _detached(args, line, child.pid, starting)
    return _refused(args, child, first, starting, echo)


class _LogEcho:
    """What the launcher writes to its log, echoed on this command's stderr while it
    starts the formation (its warnings, which members it still waits for)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def echo(self) -> None:
        with contextlib.suppress(OSError):
            with self._path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
            self._offset += len(data)
            sys.stderr.buffer.write(data)
            sys.stderr.flush()


def _first_line(stdout: IO[bytes], log: _LogEcho) -> bytes:
    """The launcher's first stdout line (b"" when it ended first), its log echoed
    meanwhile every :data:`ECHO_SECONDS`."""
    fd, line = stdout.fileno(), b""
    while True:
        ready, _, _ = select.select([fd], [], [], ECHO_SECONDS)
        log.echo()
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        line += chunk
        if not chunk or b"\n" in line:
            log.echo()
            return line.split(b"\n", 1)[0] + (b"\n" if b"\n" in line else b"")


def _detached(args: argparse.Namespace, line: dict[str, object], pid: int,
              starting: Path) -> int:
    formation_id = str(line.get("formation_id"))
    log = detached_log(formation_id)
    try:
        starting.rename(log)  # the launcher keeps writing to the same file
    except OSError:
        log = starting
    if args.json:
        print(json.dumps({**line, "detached": True, "launcher_pid": pid,
                          "launcher_log": str(log)}), flush=True)
    else:
        print(formation_id, flush=True)
        print(f"mur run: formation {formation_id} runs in the background (launcher pid "
              f"{pid}); `mur ps` shows it, `mur logs {formation_id}` what its members "
              f"print, `mur stop {formation_id}` ends it; the launcher's own lines are in "
              f"{log}", file=sys.stderr, flush=True)
    return 0


def _refused(args: argparse.Namespace, child: subprocess.Popen[bytes], first: bytes,
             starting: Path, echo: _LogEcho) -> int:
    status = child.wait()
    echo.echo()                 # the rest of what it said
    starting.unlink(missing_ok=True)
    if args.json and first:
        sys.stdout.write(first.decode("utf-8", "replace"))
        sys.stdout.flush()
    return status or 1


def _json_object(raw: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _usage(args: argparse.Namespace, message: str, status: int = 2) -> int:
    if args.json:
        print(json.dumps(failure_json("mur run", status, message)))
    else:
        print(f"mur run: {message}", file=sys.stderr)
    return status
