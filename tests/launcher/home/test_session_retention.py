"""The retention pass over a capsule's own sessions (docs/runtime-files.md, "Retention of
sessions"): newest kept, the current and running ones never removed, other capsules'
sessions never counted."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from launcher.home import records
from launcher.home.running_records import RunningRecord, write_running
from launcher.home.session_retention import format_session_removal, session_retention_pass
from launcher.ids import is_session_id
from launcher.spawn.process import process_start_time

NOW = datetime.now(UTC)


def session_id_at(moment: datetime) -> str:
    ms = int(moment.timestamp() * 1000)
    rand = secrets.token_hex(9)
    ident = f"ses_{ms:012x}7{rand[:3]}a{rand[3:18]}"
    assert is_session_id(ident)
    return ident


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def make_session(workdir: Path, hours_ago: float, capsule: str = "local/coder") -> str:
    ident = session_id_at(NOW - timedelta(hours=hours_ago))
    staged = records.stage_session(workdir, ident)
    staged.trace.write_text(json.dumps({"ts": "x", "event": "session_start",
                                        "session_id": ident, "capsule": capsule}) + "\n")
    return ident


def on_disk(workdir: Path) -> set[str]:
    return {path.name for path in records.workdir_records(workdir).iterdir()}


def run_pass(workdir: Path, current: str, **bounds: object) -> list[str]:
    removals = session_retention_pass(
        sessions_dir=records.workdir_records(workdir), capsule="local/coder",
        current_session_id=current, max_sessions=bounds.get("max_sessions"),  # type: ignore[arg-type]
        max_age=bounds.get("max_age"))  # type: ignore[arg-type]
    return [format_session_removal(removal) for removal in removals]


@pytest.fixture
def live_process() -> Iterator[tuple[int, str]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = process_start_time(child.pid)
    assert start is not None
    yield child.pid, start
    child.kill()
    child.wait()


def test_max_sessions_keeps_the_newest_the_current_one_included(workdir: Path) -> None:
    old = [make_session(workdir, hours) for hours in (5, 4, 3, 2)]
    current = make_session(workdir, 0)
    lines = run_pass(workdir, current, max_sessions=2)
    assert on_disk(workdir) == {old[-1], current}
    assert lines == [f"[mur run] retention: removed session {ident} (max_sessions)"
                     for ident in reversed(old[:-1])], "newest first, one line each"


def test_max_age_removes_older_sessions_and_names_max_age_for_one_over_both(
        workdir: Path) -> None:
    ancient = make_session(workdir, 24 * 10)
    recent = make_session(workdir, 1)
    current = make_session(workdir, 0)
    lines = run_pass(workdir, current, max_sessions=2, max_age=timedelta(days=7))
    assert on_disk(workdir) == {recent, current}
    assert lines == [f"[mur run] retention: removed session {ancient} (max_age)"]


def test_other_capsules_and_unreadable_sessions_are_never_counted_or_removed(
        workdir: Path) -> None:
    other = [make_session(workdir, hours, capsule="local/reviewer") for hours in (9, 8, 7)]
    unreadable = session_id_at(NOW - timedelta(hours=6))
    records.stage_session(workdir, unreadable).trace.write_text("not json\n")
    mine = make_session(workdir, 5)
    current = make_session(workdir, 0)
    assert run_pass(workdir, current, max_sessions=1) == [
        f"[mur run] retention: removed session {mine} (max_sessions)"]
    assert on_disk(workdir) == {*other, unreadable, current}


def test_a_running_session_and_a_newer_one_are_never_removed(
        workdir: Path, live_process: tuple[int, str]) -> None:
    running = make_session(workdir, 3)
    write_running(RunningRecord(id=running, pid=live_process[0], start=live_process[1],
                                kind="session"))
    current = make_session(workdir, 2)
    newer = make_session(workdir, 0)
    assert run_pass(workdir, current, max_sessions=1, max_age=timedelta(minutes=1)) == []
    assert on_disk(workdir) == {running, current, newer}


def test_a_symlink_in_place_of_a_session_is_never_followed(workdir: Path,
                                                           tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    current = make_session(workdir, 0)
    linked = session_id_at(NOW - timedelta(hours=4))
    os.symlink(outside, records.workdir_records(workdir) / linked)
    (outside / "trace.jsonl").write_text(json.dumps(
        {"event": "session_start", "capsule": "local/coder"}) + "\n")
    assert run_pass(workdir, current, max_sessions=1) == []
    assert (outside / "keep.txt").read_text() == "precious"


def test_without_retain_nothing_is_read_or_removed(workdir: Path) -> None:
    old = make_session(workdir, 3)
    current = make_session(workdir, 0)
    assert run_pass(workdir, current) == []
    assert on_disk(workdir) == {old, current}
