"""A session's ``tasks.db`` (launcher/home/task_db.py): made 0600 and in WAL mode, written
by a process of its own in batches (the newest snapshot of a task wins, shipped from the
event loop without a thread), bounded like the memory store, read back after a
``SIGKILL`` of the process that wrote it, and a file that is not a task database refused
with the file's name and nothing of its contents."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launcher.home.task_db import FILE_NAME, FLUSH_SECONDS, TaskDb, TaskDbUnreadable
from launcher.home.task_writer import TaskWriter, shipped


@dataclass
class Task:
    """What tasks.db reads of a door's task (gateway.JournaledTask)."""

    id: str
    owner: str
    state: str
    text: str = "hi"
    updated_ns: int = field(default_factory=time.time_ns)

    @property
    def terminal(self) -> bool:
        return self.state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")

    def snapshot(self) -> dict[str, Any]:
        return {"id": self.id, "contextId": f"ctx-{self.id}", "status": {"state": self.state},
                "history": [{"messageId": f"m-{self.id}", "role": "ROLE_USER",
                             "parts": [{"text": self.text}]}]}


def task(task_id: str, state: str = "TASK_STATE_WORKING", text: str = "hi",
         owner: str = "operator") -> Task:
    return Task(task_id, owner, state, text)


def test_the_database_and_its_wal_are_the_users_alone(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)
    db.put(task("a"))
    db.flush()
    mode = db._db.execute("PRAGMA journal_mode").fetchone()[0]
    for name in (FILE_NAME, f"{FILE_NAME}-wal"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    db.close()
    assert mode == "wal"


def test_a_put_is_written_by_the_writer_and_the_newest_snapshot_wins(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)
    db.put(task("a", owner="member:planner"))
    db.put(task("a", "TASK_STATE_COMPLETED", "done", owner="member:planner"))
    deadline = time.monotonic() + 5
    while db.writes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert db.writes >= 1
    (stored,) = db.load()
    assert (stored.id, stored.owner, stored.state, stored.terminal) == \
        ("a", "member:planner", "TASK_STATE_COMPLETED", True)
    assert stored.task["history"][0]["parts"][0]["text"] == "done"
    db.close()


def test_ended_tasks_past_the_bound_are_forgotten_oldest_first_and_live_ones_never(
        tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path, max_finished=3)
    db.put(task("live"))
    for number in range(6):
        db.put(task(f"done-{number}", "TASK_STATE_COMPLETED"))
        db.flush()
    db.close()  # the bound is kept every BOUND_EVERY writes, and at close
    again = TaskDb.open(tmp_path, max_finished=3)
    kept = [stored.id for stored in again.load()]
    again.close()
    assert kept == ["live", "done-3", "done-4", "done-5"]


def test_what_was_written_survives_a_sigkill_of_the_writer(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from types import SimpleNamespace\n"
        "from launcher.home.task_db import TaskDb\n"
        "db = TaskDb.open(Path(sys.argv[1]))\n"
        "for n in range(50):\n"
        "    snap = {'id': f't{n}', 'contextId': 'c', 'status': {'state': 'TASK_STATE_WORKING'}}\n"
        "    db.put(SimpleNamespace(id=f't{n}', owner='operator', terminal=False, updated_ns=n,\n"
        "                           snapshot=lambda snap=snap: snap))\n"
        "time.sleep(0.5)\n"
        "print('written', flush=True)\n"
        "time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "written"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    db = TaskDb.open(tmp_path)
    assert sorted(stored.id for stored in db.load()) == sorted(f"t{n}" for n in range(50))
    db.close()


def test_a_corrupt_file_is_refused_naming_the_file_not_its_contents(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"SQLite format 3\x00" + b"secret-looking bytes" * 300)
    with pytest.raises(TaskDbUnreadable) as refused:
        TaskDb.open(tmp_path)
    assert str(tmp_path / FILE_NAME) in str(refused.value)
    assert "secret" not in str(refused.value)


def run_sql(path: Path, statement: str) -> None:
    """One statement on ``path`` with SQLite itself, as another program would."""
    connection = sqlite3.connect(path)
    try:
        connection.execute(statement)
        connection.commit()
    finally:
        connection.close()


def test_another_programs_database_and_a_newer_schema_are_refused(tmp_path: Path) -> None:
    run_sql(tmp_path / FILE_NAME, "CREATE TABLE tasks (name TEXT)")
    with pytest.raises(TaskDbUnreadable, match="not a task database"):
        TaskDb.open(tmp_path)
    newer = tmp_path / "newer"
    newer.mkdir()
    TaskDb.open(newer).close()
    run_sql(newer / FILE_NAME, "UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(TaskDbUnreadable, match="schema 99; this mur reads schema 1"):
        TaskDb.open(newer)


def test_close_writes_what_is_still_queued(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)
    db.put(task("last"))
    db.close()
    again = TaskDb.open(tmp_path)
    assert [stored.id for stored in again.load()] == ["last"]
    again.close()
    assert os.path.exists(tmp_path / FILE_NAME)


def test_a_token_quoted_in_a_message_is_never_written(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)
    db.put(task("a", text="use Authorization: Bearer mft1.eyJhbGciOi.c2lnbmF0dXJl please"))
    db.close()
    again = TaskDb.open(tmp_path)
    (stored,) = again.load()
    again.close()
    assert "[redacted]" in stored.task["history"][0]["parts"][0]["text"]
    for name in os.listdir(tmp_path):
        assert b"mft1." not in (tmp_path / name).read_bytes(), name


def test_a_task_json_cannot_write_fast_is_written_by_the_json_module(tmp_path: Path) -> None:
    """The writer's encoder (orjson) refuses an integer past 64 bits, a lone surrogate and
    a key that is not a string: each such task is still written, whole."""
    cases = {"big": {"n": 2**70}, "surrogate": {"s": "a\ud800b"}, "int-key": {1: "one"},
             "accents": {"s": "café ü 你好"}}
    db = TaskDb.open(tmp_path)
    for name, metadata in cases.items():
        db.put(WithMetadata(name, "operator", "TASK_STATE_COMPLETED", metadata=metadata))
    db.close()
    again = TaskDb.open(tmp_path)
    stored = {row.id: row.task["metadata"] for row in again.load()}
    again.close()
    assert stored == {"big": {"n": 2**70}, "surrogate": {"s": "a\ud800b"},
                      "int-key": {"1": "one"}, "accents": {"s": "café ü 你好"}}


def test_a_task_no_json_can_hold_is_left_out_and_said_the_others_are_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = TaskDb.open(tmp_path)
    db.put(WithMetadata("odd", "operator", "TASK_STATE_COMPLETED", metadata={"x": object()}))
    db.put(task("fine"))
    with caplog.at_level(logging.WARNING, logger="murmur.member"):
        db.close()
    again = TaskDb.open(tmp_path)
    assert [stored.id for stored in again.load()] == ["fine"]
    again.close()
    assert "task odd left out: it holds what JSON cannot (TypeError)" in caplog.text


@dataclass
class WithMetadata(Task):
    metadata: dict[Any, Any] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "metadata": self.metadata}


class FailingOnce:
    """A connection whose first batch of writes fails, as on a full disk."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def executemany(self, sql: str, rows: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return self.real.executemany(sql, rows)


def test_a_failed_write_keeps_its_tasks_and_writes_them_next_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = TaskDb.open(tmp_path)
    db.close()
    failing = FailingOnce(sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None))
    writer = TaskWriter(failing, tmp_path / FILE_NAME, 1000)  # type: ignore[arg-type]
    writer.write([shipped("a", "operator", True, 1, {
        "id": "a", "contextId": "ctx", "status": {"state": "TASK_STATE_COMPLETED"}})])
    assert failing.failed and writer.waiting
    assert "a write failed (OperationalError: database or disk is full)" in \
        capsys.readouterr().err
    writer.write(())                      # tried again: nothing new needed
    assert not writer.waiting
    writer.close()
    with sqlite3.connect(tmp_path / FILE_NAME) as reader:
        assert reader.execute("SELECT id, state FROM tasks").fetchall() == [
            ("a", "TASK_STATE_COMPLETED")]


def test_on_the_event_loop_puts_are_shipped_together_later(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)

    async def puts() -> int:
        for number in range(10):
            db.put(task(f"t{number}"))
        shipped_at_once = db.writes
        await asyncio.sleep(FLUSH_SECONDS * 4)
        return shipped_at_once

    assert asyncio.run(puts()) == 0       # nothing on the request path but a dict entry
    assert db.writes == 1                 # ten tasks, one batch
    assert len(db.load()) == 10
    db.close()


def test_a_session_that_keeps_no_task_starts_no_writer(tmp_path: Path) -> None:
    db = TaskDb.open(tmp_path)
    db.load()
    db.close()
    assert db._writer is None
