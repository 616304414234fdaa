"""A session's durable tasks: ``tasks.db`` in its records directory, SQLite in WAL mode,
mode 0600 (docs/durable-tasks.md). The standard library's ``sqlite3``
is used from one writer thread: an async wrapper would only move the same thread into a
dependency, and the door never waits for a write.

In this order:

1. :meth:`TaskDb.open`: the file made 0600 before SQLite opens it (never a moment
   readable by others), WAL, the schema; a file that is not a task database of this
   version (corrupt, another program's, a newer schema) is refused with
   :class:`TaskDbUnreadable`, naming the file and never its contents;
2. :meth:`TaskDb.put`: a task that changed, queued by its id; the request path does
   nothing more (one dict assignment; a task that changes again before the writer runs
   is written once);
3. the writer thread: every :data:`FLUSH_SECONDS` (or at once past :data:`BATCH_ROWS`
   queued tasks), each queued task's latest state read (``snapshot()``; a door replaces
   a task's lists, never changes them in place, so a snapshot taken here is whole) with
   every token shape redacted (as the trace is: no token in any file), one
   transaction of upserts, and every :data:`BOUND_EVERY` writes (and at close) the bound:
   past ``max_finished`` ended tasks the oldest are deleted (the memory store's bound,
   so a resumed session knows what the ended one knew);
4. :meth:`TaskDb.load`: every task kept, oldest first, for ``mur run --resume``;
5. :meth:`TaskDb.close`: the queue flushed, the thread joined, the database closed.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gateway import redact_value
from launcher.errors import LauncherError

if TYPE_CHECKING:
    from gateway import JournaledTask

__all__ = ["StoredTask", "TaskDb", "TaskDbUnreadable", "put_aside"]

log = logging.getLogger("murmur.member")

FILE_NAME: Final = "tasks.db"
SCHEMA_VERSION: Final = 1
FLUSH_SECONDS: Final = 0.05
BATCH_ROWS: Final = 256
#: The bound is kept every this many writes (a scan of the ended tasks; between two, a
#: few seconds' worth more may be kept), and at close.
BOUND_EVERY: Final = 20
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, "
    "owner TEXT NOT NULL, state TEXT NOT NULL, terminal INTEGER NOT NULL, "
    "updated_ns INTEGER NOT NULL, task TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS tasks_by_age ON tasks (terminal, updated_ns)",
)
_UPSERT: Final = ("INSERT INTO tasks (id, context_id, owner, state, terminal, updated_ns, task) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                  "state=excluded.state, terminal=excluded.terminal, "
                  "updated_ns=excluded.updated_ns, task=excluded.task")
_BOUND: Final = ("DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE terminal = 1 "
                 "ORDER BY updated_ns DESC LIMIT -1 OFFSET ?)")


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
    """One session's ``tasks.db`` (module docstring); a writer thread of its own."""

    def __init__(self, path: Path, connection: sqlite3.Connection, max_finished: int) -> None:
        self.path = path
        self._db = connection
        self.max_finished = max_finished
        self._pending: dict[str, JournaledTask] = {}
        self._lock = threading.Lock()
        #: One transaction at a time (the writer's, a load's or close's flush).
        self._transaction = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self.writes = 0
        self._thread = threading.Thread(target=self._write_loop, name="murmur-task-db",
                                        daemon=True)
        self._thread.start()

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
        """Queue ``task`` to be written with its state at that time; returns at once."""
        with self._lock:
            self._pending[task.id] = task
            full = len(self._pending) >= BATCH_ROWS
        if full:
            self._wake.set()

    # 3. the writer -------------------------------------------------------------------

    def _write_loop(self) -> None:
        failing = False
        while True:
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            try:
                self.flush()
                failing = False
            # A full disk, say: told once, the batch kept and tried again.
            except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
                if not failing:
                    log.warning("%s: a write failed (%s: %s); trying again",
                                self.path, type(exc).__name__, exc)
                failing = True
            if self._closing:
                return

    def flush(self) -> None:
        """Write what is queued now, in one transaction (and, now and then, the bound)."""
        with self._lock:
            tasks, self._pending = list(self._pending.values()), {}
        if not tasks:
            return
        encoded = [_row(task) for task in tasks]
        with self._transaction:
            try:
                self._db.execute("BEGIN")
                self._db.executemany(_UPSERT, encoded)
                if self.writes % BOUND_EVERY == 0:
                    self._db.execute(_BOUND, (self.max_finished,))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                with self._lock:   # nothing queued is dropped: a newer snapshot wins
                    for task in tasks:
                        self._pending.setdefault(task.id, task)
                raise
            self.writes += 1

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
        self._closing = True
        self._wake.set()
        self._thread.join(timeout=10)
        self.flush()
        self._db.execute(_BOUND, (self.max_finished,))
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


def _row(task: JournaledTask) -> tuple[Any, ...]:
    snapshot = task.snapshot()
    text = json.dumps(snapshot, separators=(",", ":"))
    # No token in any file but operator.token: a message may quote one, redacted as the
    # trace is (gateway.redaction); every token shape holds one of these two words.
    if "mft1." in text or "bearer" in text.lower():
        snapshot = redact_value(snapshot)
        text = json.dumps(snapshot, separators=(",", ":"))
    status = snapshot.get("status")
    state = str(status.get("state", "")) if isinstance(status, dict) else ""
    return (task.id, str(snapshot.get("contextId", "")), task.owner, state,
            1 if task.terminal else 0, task.updated_ns, text)


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
