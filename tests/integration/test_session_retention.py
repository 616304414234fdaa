"""trace.retain bounds a capsule's own sessions, with real `mur run --capsule` processes
(docs/runtime-files.md, "Retention of sessions")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.home.paths import workdir_records
from tests.support import member as support
from tests.support.member import Project

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def sessions_of(project: Project) -> list[str]:
    return sorted(path.name for path in workdir_records(project.path).iterdir()
                  if path.name.startswith("ses_"))


def test_max_sessions_keeps_the_newest_sessions_of_the_capsule_and_says_each_removal(
        project: Project) -> None:
    project.capsule("echo", extra="trace:\n  retain: {max_sessions: 2}\n")
    project.capsule("other")
    stray = project.run("other", "--task", "not mine")
    assert stray.wait() == 0, stray.stderr
    ran, said = [], []
    for number in range(4):
        member = project.run("echo", "--task", f"task {number}")
        assert member.wait() == 0, member.stderr
        ran.append(member.ready["session_id"])
        said.append(re.findall(r"^\[mur run\] retention: .*$", member.stderr, re.M))
    assert said[0] == said[1] == []
    assert said[2] == [f"[mur run] retention: removed session {ran[0]} (max_sessions)"]
    assert said[3] == [f"[mur run] retention: removed session {ran[1]} (max_sessions)"]
    assert sessions_of(project) == sorted([stray.ready["session_id"], *ran[2:]]), (
        "the newest two of the capsule stay; another capsule's session is not counted")
