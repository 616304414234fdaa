"""Durable tasks on a real formation (docs/durable-tasks.md): every member's door keeps
its tasks in its session's ``tasks.db`` (0600, WAL), each with its owner, written off the
request path and complete when the member has ended; a ``tasks.db`` that is not a task
database is refused with ``E-RUN-067`` naming the file."""

from __future__ import annotations

import json
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    mur,
    simple_project,
)
from tests.support.member import Project, member_env, start_member

pytestmark = pytest.mark.integration


def stored(murmur_home: Path) -> list[tuple[str, str, dict[str, object]]]:
    """Every session's tasks.db rows (owner, state, task); each file checked 0600."""
    found = []
    for db_path in (murmur_home / "records").rglob("tasks.db"):
        assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
        with sqlite3.connect(db_path) as db:
            rows = db.execute("SELECT owner, state, task FROM tasks").fetchall()
        found += [(owner, state, json.loads(task)) for owner, state, task in rows]
    return found


def test_every_doors_tasks_are_in_its_sessions_tasks_db_with_their_owners(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                             reachability={"planner": ["coder", "reviewer"]},
                             agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT,
                                     "reviewer": REVIEWER_AGENT})
    done = mur("run", "--roster", "--project", str(project), "--task", "the parser",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = stored(murmur_home)
    owners = sorted(owner for owner, _, _ in rows)
    assert owners == ["member:planner", "member:planner", "operator"], rows
    assert {state for _, state, _ in rows} == {"TASK_STATE_COMPLETED"}
    texts = json.dumps([task for _, _, task in rows])
    assert "the parser" in texts and "code for <write the parser>" in texts


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def test_a_resumed_session_whose_tasks_db_is_corrupt_is_refused_naming_it(
        project: Project) -> None:
    project.capsule("echo")
    first = project.run("echo", "--task", "hi")
    assert first.wait() == 0
    session = first.ready["session_id"]
    (db_path,) = (project.home / "records").rglob(f"{session}/tasks.db")
    db_path.write_bytes(b"SQLite format 3\x00" + b"not a page" * 500)
    process = start_member(project.path, "local/echo", "--resume", session, "--task", "again",
                           env=member_env(project.home))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err.decode()
    assert "E-RUN-067" in err.decode() and str(db_path) in err.decode()
    assert "Traceback" not in err.decode() and "not a page" not in err.decode()
