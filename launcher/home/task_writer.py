"""The writer of a session's ``tasks.db``: a process of its own, started by the member
runtime at the first task it keeps, that writes the batches the runtime sends it.

Why a process: a second thread in the runtime, even one that only wakes every 50 ms,
takes the GIL from the door's busy event loop and costs every request more than the
writing itself (loadtests/bench_door.py --durable-only; docs/durable-tasks.md). In a
process of its own, SQLite's work and the redaction run beside the loop, not in its way;
the runtime only encodes each changed task as JSON (orjson: cheaper than pickling the
task's dicts was) and writes one batch to a pipe.

In order:

1. the protocol: frames on a pipe, each a 4-byte big-endian length and a pickled message
   (the two ends are this runtime and the writer it started, nothing else writes the
   pipe):
   ``("rows", [(id, context_id, owner, state, terminal, updated_ns, task), ...])`` to
   upsert (``task`` the A2A Task as JSON, :func:`shipped`, made by the runtime; redacted
   here, :func:`encode`), ``("flush", n)`` to be answered with ``n`` on the answer pipe
   once everything before it is committed, ``("close", bound)`` to keep the bound a
   last time and end;
2. :class:`TaskWriter`, the writing itself, on a connection of its own (testable in
   process): each batch one transaction; every :data:`BOUND_EVERY` batches the bound;
   a batch that fails (a full disk) is said once on stderr, kept, and written again
   with the next one or after :data:`RETRY_SECONDS`;
3. :func:`spawn_writer`: the process, a new interpreter started at the session's first
   task (its stdin the batches, its stdout the answers; it ignores the signals that end
   a runtime: it ends when the runtime closes its pipe or dies, after committing what
   it read), :func:`main` and :func:`serve`, its loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import signal
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from gateway import dumps, redact_value
from launcher.spawn.process_title import name_process

FRAME: Final = struct.Struct(">I")
#: The bound is kept every this many batches (a scan of the ended tasks), and at close.
BOUND_EVERY: Final = 20
#: How soon a batch that failed is tried again when no new batch comes.
RETRY_SECONDS: Final = 0.5
UPSERT: Final = ("INSERT INTO tasks (id, context_id, owner, state, terminal, updated_ns, "
                 "task) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                 "state=excluded.state, terminal=excluded.terminal, "
                 "updated_ns=excluded.updated_ns, task=excluded.task")
BOUND: Final = ("DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE terminal = 1 "
                "ORDER BY updated_ns DESC LIMIT -1 OFFSET ?)")
Row = tuple[Any, ...]
#: A task as the runtime ships it: id, context id, owner, state, terminal, when its state
#: last changed, and the A2A Task as JSON.
Shipped = tuple[str, str, str, str, bool, int, bytes]


# --------------------------------------------------------------------- 1. the protocol

def frame(message: tuple[Any, ...]) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> tuple[Any, ...] | None:
    """The next message, or None at the end of the pipe (or a torn last frame)."""
    head = _read_exactly(fd, FRAME.size)
    if head is None:
        return None
    body = _read_exactly(fd, FRAME.unpack(head)[0])
    # The runtime that started this process is the pipe's one writer (module docstring).
    return None if body is None else tuple(pickle.loads(body))  # noqa: S301


# --------------------------------------------------------------------- 2. the writing

def shipped(task_id: str, owner: str, terminal: bool, updated_ns: int,
            task: dict[str, Any]) -> Shipped:
    """A task as the runtime ships it (its JSON made by ``gateway.dumps``: orjson, the
    json module for what orjson refuses). A value no JSON holds raises TypeError."""
    status = task.get("status")
    state = str(status.get("state", "")) if isinstance(status, dict) else ""
    return (task_id, str(task.get("contextId", "")), owner, state, terminal, updated_ns,
            dumps(task))


def encode(task: Shipped) -> Row:
    """A task as shipped, as its row: every token shape in it redacted as the trace is (a
    message may quote one; no token in any file but ``operator.token``): every token
    shape holds one of the two words looked for."""
    task_id, context_id, owner, state, terminal, updated_ns, data = task
    text = data.decode("utf-8")
    if "mft1." in text or "bearer" in text.lower():
        text = json_text(redact_value(json.loads(text)))
    return (task_id, context_id, owner, state, 1 if terminal else 0, updated_ns, text)


def json_text(task: Any) -> str:
    """``task`` as compact JSON, as the door writes its answers (``gateway.dumps``)."""
    return dumps(task).decode("utf-8")


class TaskWriter:
    """Writes batches of rows to ``connection`` (see the module docstring)."""

    def __init__(self, connection: sqlite3.Connection, path: Path, max_finished: int) -> None:
        self._db = connection
        self._path = path
        self._max_finished = max_finished
        #: Rows of batches that failed, by task id (a newer row of a task wins).
        self._waiting: dict[Any, Row] = {}
        self._failing = False
        self.batches = 0

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def write(self, shipped: Sequence[Shipped]) -> None:
        """The tasks ``shipped`` (and what failed before) in one transaction; a failure
        is said once and its rows kept for the next attempt."""
        for task in shipped:
            row = encode(task)
            self._waiting[row[0]] = row
        if not self._waiting:
            return
        try:
            self._db.execute("BEGIN")
            self._db.executemany(UPSERT, list(self._waiting.values()))
            if self.batches % BOUND_EVERY == 0:
                self._db.execute(BOUND, (self._max_finished,))
            self._db.execute("COMMIT")
        except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if not self._failing:
                _say(f"{self._path}: a write failed ({type(exc).__name__}: {exc}); "
                     "trying again")
            self._failing = True
            return
        self._waiting.clear()
        self._failing = False
        self.batches += 1

    def close(self) -> None:
        self.write(())
        with contextlib.suppress(sqlite3.Error):
            self._db.execute(BOUND, (self._max_finished,))
        self._db.close()


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"[mur run] warning: tasks.db {line}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------- 3. the process

def spawn_writer(path: Path, max_finished: int) -> subprocess.Popen[bytes]:
    """Start the writer of ``path``: a new interpreter (a fork of a runtime that runs
    threads could inherit a lock another thread held), its stdin the pipe batches go
    to, its stdout the pipe its answers come on, its stderr the runtime's; ``-P`` and
    ``/`` as its directory: no module planted in a folder an agent may write is
    imported by it."""
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "launcher.home.task_writer", str(path), str(max_finished)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/", close_fds=True)
    assert process.stdin is not None
    with contextlib.suppress(OSError):   # a batch of 256 tasks fits: the loop never waits
        import fcntl

        fcntl.fcntl(process.stdin.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
    return process


def main(argv: Sequence[str]) -> int:
    """The writer process: ``python -m launcher.home.task_writer PATH MAX_FINISHED``."""
    # The runtime's ending signals reach its process group: this process ends when its
    # pipe does, after committing what it read.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    path = Path(argv[0])
    name_process(f"mur tasks.db writer of {path.parent.name}", "mur:task-db")
    return serve(path, int(argv[1]), sys.stdin.fileno(), sys.stdout.fileno())


def serve(path: Path, max_finished: int, batches: int, answers: int) -> int:
    """Write every batch that comes until the pipe ends or ``close``; the exit status."""
    try:
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        _say(f"{path} cannot be opened by its writer ({type(exc).__name__}: {exc})")
        return 1
    writer = TaskWriter(connection, path, max_finished)
    while True:
        if writer.waiting:  # a failed batch: tried again when nothing new comes
            ready, _, _ = select.select([batches], [], [], RETRY_SECONDS)
            if not ready:
                writer.write(())
                continue
        message = read_frame(batches)
        if message is None or message[0] == "close":
            writer.close()
            return 0
        if message[0] == "rows":
            writer.write(message[1])
        elif message[0] == "flush":
            with contextlib.suppress(OSError):
                write_all(answers, FRAME.pack(int(message[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
