"""A session's durable tasks: ``tasks.db`` in its records directory, SQLite in WAL mode,
mode 0600 (docs/durable-tasks.md). The standard library's ``sqlite3``, written by a
process of its own (launcher/home/task_writer.py): the door never waits for a write, and
no second thread of the runtime contends with its event loop.

In this order:

1. :meth:`TaskDb.open`: the file made 0600 before SQLite opens it (never a moment
   readable by others), WAL, the schema; a file that is not a task database of this
   version (corrupt, another program's, a newer schema) is refused with
   :class:`TaskDbUnreadable`, naming the file and never its contents;
2. :meth:`TaskDb.put`: a task that changed, queued by its id (a task that changes again
   before it is shipped is written once); on the event loop, a ship is scheduled
   :data:`FLUSH_SECONDS` later (at once past :data:`BATCH_ROWS` queued tasks); with no
   loop running (a script, a test), the task is shipped at once;
3. the ship: each queued task's latest state read (``snapshot()``; a door replaces a
   task's lists, never changes them in place, so a snapshot taken here is whole),
   encoded as JSON, and written to the writer's pipe as one batch (the writer redacts
   every token shape in it: no token in any file); a task no JSON can hold is said on
   the log and left out; the writer is started at the first ship, so a session that
   keeps no task never starts one;
4. :meth:`TaskDb.load`: every task kept, oldest first, for ``mur run --resume`` (read
   here, on this process's own connection, once the writer has committed what was
   shipped);
5. :meth:`TaskDb.close`: what is queued shipped, the writer told to keep the bound and
   end, and waited for; the database closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from launcher.errors import LauncherError
from launcher.home.task_writer import BOUND, FRAME, frame, shipped, spawn_writer, write_all
from launcher.sandbox import descendants

if TYPE_CHECKING:
    from gateway import JournaledTask

__all__ = ["StoredTask", "TaskDb", "TaskDbUnreadable", "put_aside"]

logger = logging.getLogger("murmur.member")

FILE_NAME: Final = "tasks.db"
SCHEMA_VERSION: Final = 1
FLUSH_SECONDS: Final = 0.05
BATCH_ROWS: Final = 256
#: How long ``flush`` and ``close`` wait for the writer.
WRITER_SECONDS: Final = 10.0
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, "
    "owner TEXT NOT NULL, state TEXT NOT NULL, terminal INTEGER NOT NULL, "
    "updated_ns INTEGER NOT NULL, task TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS tasks_by_age ON tasks (terminal, updated_ns)",
)


class TaskDbUnreadable(LauncherError, OSError):
    """``tasks.db`` is not a task database this version reads (the text names the file
    and what is wrong, never a row)."""


@dataclass(frozen=True, slots=True)
class StoredTask:
    """One task as ``tasks.db`` keeps it: the A2A Task and who owns it."""

    id: str
    context_id: str
    owner: str
    state: str
    terminal: bool
    task: dict[str, Any]
    updated_ns: int


class TaskDb:
    """One session's ``tasks.db`` (module docstring); its writer a process of its own."""

    def __init__(self, path: Path, connection: sqlite3.Connection, max_finished: int) -> None:
        self.path = path
        self._db = connection
        self.max_finished = max_finished
        self._pending: dict[str, JournaledTask] = {}
        self._scheduled: asyncio.TimerHandle | None = None
        #: The writer process: its stdin the batches, its stdout the answers.
        self._writer: subprocess.Popen[bytes] | None = None
        self._flushes = 0
        self._closed = False
        #: Batches shipped to the writer.
        self.writes = 0

    # 1. open -----------------------------------------------------------------------

    @classmethod
    def open(cls, folder: Path, *, max_finished: int = 1000) -> TaskDb:
        path = folder / FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
        try:
            connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise TaskDbUnreadable(f"{path} cannot be opened: {type(exc).__name__}") from None
        try:
            _prepare(connection, path)
        except BaseException:
            connection.close()
            raise
        return cls(path, connection, max_finished)

    # 2. put ------------------------------------------------------------------------

    def put(self, task: JournaledTask) -> None:
        """Queue ``task`` to be written with its state at ship time; returns at once."""
        if self._closed:
            return
        pending = self._pending
        pending[task.id] = task
        if self._scheduled is not None and len(pending) < BATCH_ROWS:
            return                  # a ship is on its way (a door puts a task 3-4 times)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.ship()             # no loop to wait on: now
            return
        if len(self._pending) >= BATCH_ROWS:
            self.ship()
        elif self._scheduled is None:
            self._scheduled = loop.call_later(FLUSH_SECONDS, self.ship)

    # 3. the ship ---------------------------------------------------------------------

    def ship(self) -> None:
        """What is queued now, encoded, to the writer as one batch."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        tasks, self._pending = list(self._pending.values()), {}
        if not tasks:
            return
        # Each as JSON (orjson: cheaper here than pickling the snapshot's dicts, and the
        # writer then reads bytes); the writer redacts them off this loop.
        rows = []
        for task in tasks:
            try:
                rows.append(shipped(task.id, task.owner, task.terminal, task.updated_ns,
                                    task.snapshot()))
            except (TypeError, ValueError) as exc:
                logger.warning("tasks.db: task %s left out: it holds what JSON cannot "
                               "(%s)", task.id, type(exc).__name__)
        if rows:
            self._send(("rows", rows))
            self.writes += 1

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._writer is None:
            self._writer = spawn_writer(self.path, self.max_finished)
            # Started on purpose, waited for here, and ending with its pipe: not agent
            # code's, which the runtime kills when it ends.
            descendants.spare(self._writer.pid)
        assert self._writer.stdin is not None
        write_all(self._writer.stdin.fileno(), frame(message))

    def flush(self) -> None:
        """Ship what is queued and wait until the writer has committed it."""
        self.ship()
        if self._writer is None:
            return
        self._flushes += 1
        self._send(("flush", self._flushes))
        assert self._writer.stdout is not None
        answers = self._writer.stdout.fileno()
        until = time.monotonic() + WRITER_SECONDS
        while True:
            ready, _, _ = select.select([answers], [], [], max(0.0, until - time.monotonic()))
            if not ready:
                raise OSError(f"{self.path}: its writer did not answer within "
                              f"{WRITER_SECONDS:g} s")
            data = os.read(answers, FRAME.size)
            if not data:
                raise OSError(f"{self.path}: its writer ended")
            if FRAME.unpack(data.ljust(FRAME.size, b"\0"))[0] >= self._flushes:
                return

    # 4. load -------------------------------------------------------------------------

    def load(self) -> list[StoredTask]:
        """Every task kept, oldest first."""
        self.flush()
        found = []
        for row in self._db.execute("SELECT id, context_id, owner, state, terminal, task, "
                                    "updated_ns FROM tasks ORDER BY updated_ns, rowid"):
            try:
                task = json.loads(row[5])
            except ValueError:
                raise TaskDbUnreadable(f"{self.path} holds a task that is not JSON") from None
            found.append(StoredTask(row[0], row[1], row[2], row[3], bool(row[4]), task,
                                     int(row[6])))
        return found

    # 5. close ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self.ship()
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is None:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(BOUND, (self.max_finished,))
        else:
            assert writer.stdin is not None and writer.stdout is not None
            with contextlib.suppress(OSError):
                write_all(writer.stdin.fileno(), frame(("close", self.max_finished)))
            writer.stdin.close()
            writer.stdout.close()
            try:
                writer.wait(WRITER_SECONDS)
            except subprocess.TimeoutExpired:  # what it committed stays
                writer.kill()
                writer.wait()
            descendants.release(writer.pid)
        self._db.close()


def put_aside(folder: Path) -> Path | None:
    """``mur run --resume --discard-tasks``: the ``tasks.db`` in ``folder`` (and its
    ``-wal`` and ``-shm``) renamed ``tasks.db.discarded-<UTC time>``, never deleted;
    the new name, or None when there was none."""
    path = folder / FILE_NAME
    if not path.exists():
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = folder / f"{FILE_NAME}.discarded-{stamp}"
    for suffix in ("", "-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.replace(side, Path(f"{aside}{suffix}"))
    return aside


def _prepare(connection: sqlite3.Connection, path: Path) -> None:
    """WAL, the schema, and this file's version checked."""
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            connection.execute(statement)
        row = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            connection.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            raise TaskDbUnreadable(f"{path} is a task database of schema {row[0]!s:.20}; "
                                   f"this mur reads schema {SCHEMA_VERSION}")
        connection.execute("SELECT id, context_id, owner, state, terminal, updated_ns, task "
                           "FROM tasks LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        raise TaskDbUnreadable(f"{path} is not a task database ({type(exc).__name__}: "
                               "the file is corrupt or another program's)") from None
    for suffix in ("-wal", "-shm"):  # SQLite makes them with the process's umask
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.chmod(side, 0o600)
